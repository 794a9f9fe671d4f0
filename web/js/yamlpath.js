// yamlpath.js — finds the line of a dotted spec path (limits.maxSteps, triggers.0.schedule) in YAML text,
// so each validation issue is shown at its line. Block-style YAML only (what specs are written in); a
// path it cannot follow resolves to its deepest found parent, or line 1.

export function lineOf(text, path) {
  const lines = text.split('\n');
  const m = /line (\d+)/i.exec(path);
  if (m) return Math.min(+m[1], lines.length);
  const parts = path.split('.').filter(Boolean);
  let from = 0, to = lines.length, indent = -1, found = 0;
  for (const part of parts) {
    let hit = -1;
    if (/^\d+$/.test(part)) {
      // the n-th "- " item directly under the current block
      let n = -1, itemIndent = -1;
      for (let i = from; i < to; i++) {
        const l = lines[i];
        if (!l.trim() || l.trim().startsWith('#')) continue;
        const ind = l.length - l.trimStart().length;
        if (ind <= indent) break;
        if (l.trimStart().startsWith('- ') || l.trim() === '-') {
          if (itemIndent < 0) itemIndent = ind;
          if (ind === itemIndent && ++n === +part) { hit = i; break; }
        }
      }
      if (hit < 0) break;
      const ind = lines[hit].length - lines[hit].trimStart().length;
      from = hit; indent = ind; // keys of the item sit after "- "
      to = blockEnd(lines, hit, ind);
      // treat the item's first key as at indent ind+2
      lines[hit] = ' '.repeat(ind) + '  ' + lines[hit].trimStart().slice(2);
      indent = ind;
      found = hit + 1;
      continue;
    }
    const re = new RegExp('^(\\s*)(["\']?)' + part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&') + '\\2\\s*:');
    let keyIndent = -1;
    for (let i = from; i < to; i++) {
      const l = lines[i];
      if (!l.trim() || l.trim().startsWith('#')) continue;
      const ind = l.length - l.trimStart().length;
      if (i > from && ind <= indent) break;
      const mm = re.exec(l);
      if (mm && ind > indent && (keyIndent < 0 || ind === keyIndent)) { hit = i; keyIndent = ind; break; }
      if (keyIndent < 0 && ind > indent) keyIndent = -1;
    }
    if (hit < 0) break;
    found = hit + 1;
    indent = lines[hit].length - lines[hit].trimStart().length;
    from = hit + 1;
    to = blockEnd(lines, hit, indent);
  }
  return found || 1;
}

function blockEnd(lines, start, indent) {
  for (let i = start + 1; i < lines.length; i++) {
    const l = lines[i];
    if (!l.trim() || l.trim().startsWith('#')) continue;
    if (l.length - l.trimStart().length <= indent) return i;
  }
  return lines.length;
}
