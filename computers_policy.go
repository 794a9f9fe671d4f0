// computers_policy.go — the one command policy, evaluated for every exec (API, terminal, agent tool).
//
// Entry point: commandPolicy{Allow, Deny}.check(cmd) → nil or 403 E_EXEC_DENIED `refused: <reason>`
// with details.rule. Order (DESIGN §4): allow patterns → allowed; deny patterns → denied; built-in deny
// list → denied. A pattern is a regular expression, or a substring when it does not compile.
//
// The built-in list matches only at command position (start, after `;`, `&`, `&&`, `||`, `|`, `$(`,
// backticks, `(`, `{`, newlines, and after the keywords then/do/else/if/while/until/!), so that
// `grep -r sudo .` and `echo shutdown >> notes` run. The scanner is quote-aware; `sh -c '<script>'`
// (also `-c -e`, `-c --`) and `find -exec` are checked recursively; a variable assigned earlier in the
// line is substituted where it is the command word, and a command word the policy cannot know — `$x`
// unassigned, `$(...)`, backticks — is refused (rule computed-command): what cannot be seen cannot be
// judged. Paths are judged as they resolve (`//` is `/`). allowCommands allow only a simple command:
// `^git status` does not allow `git status; rm -rf /`. It is a guardrail against accidents and careless
// models, not a sandbox: the isolation is the container.
package main

import (
	"path"
	"regexp"
	"strings"
)

// commandPolicy carries a caller's allow and deny patterns (an agent's allowCommands/denyCommands).
type commandPolicy struct {
	Allow []string
	Deny  []string
}

// check returns nil when cmd may run, else a 403 E_EXEC_DENIED `refused: <reason>` with details.rule.
func (p commandPolicy) check(cmd string) *apiError {
	if simpleCommand(cmd) { // an allow pattern vouches for one command, never for a chain behind it
		for _, pat := range p.Allow {
			if patternMatch(pat, cmd) {
				return nil
			}
		}
	}
	for _, pat := range p.Deny {
		if patternMatch(pat, cmd) {
			return errorf(codeExecDenied, "refused: command matches the agent's denyCommands pattern %q", pat).
				withHint("the agent's guardrails.denyCommands forbid this command").
				withDetail("rule", "denyCommands:"+pat)
		}
	}
	if r := builtinDenied(cmd, 0); r != nil {
		return errorf(codeExecDenied, "refused: %s", r.reason).
			withHint("this command is on the built-in deny list; an agent's guardrails.allowCommands can allow it explicitly").
			withDetail("rule", r.name)
	}
	return nil
}

// simpleCommand: one command, with no chaining, substitution or expansion in command position.
func simpleCommand(cmd string) bool {
	segs := splitCommand(strings.ReplaceAll(cmd, "\\\n", ""))
	if len(segs) != 1 || strings.ContainsAny(cmd, "`\n") || strings.Contains(cmd, "$(") {
		return false
	}
	w, _ := firstWord(stripPrefixes(segs[0].text))
	return !strings.HasPrefix(w, "$") && !strings.Contains(w, "${")
}

// patternMatch: a regular expression, or a plain substring when the pattern does not compile.
func patternMatch(pat, s string) bool {
	if pat == "" {
		return false
	}
	if re, err := regexp.Compile(pat); err == nil {
		return re.MatchString(s)
	}
	return strings.Contains(s, pat)
}

// denyRule is one entry of the built-in list. seg matches a command segment (already stripped of
// leading assignments and wrappers); afterPipe rules apply only to a segment fed by `|`.
type denyRule struct {
	name      string
	reason    string
	seg       *regexp.Regexp
	afterPipe bool
}

// builtinRules is a constant table (compiled once; never mutated).
var builtinRules = []denyRule{
	{"rm-root", "recursive delete of /",
		regexp.MustCompile(`^rm\s+(?:\S+\s+)*?(?:-[a-zA-Z]*[rR][a-zA-Z]*|--recursive)\s+(?:\S+\s+)*?(?:/|/\*|/\.|--no-preserve-root|~|~/|\$HOME)(?:\s|$)`), false},
	{"rm-root", "recursive delete of /",
		regexp.MustCompile(`^rm\s+(?:\S+\s+)*?(?:/|/\*)\s+(?:\S+\s+)*?(?:-[a-zA-Z]*[rR][a-zA-Z]*|--recursive)(?:\s|$)`), false},
	{"mkfs", "filesystem formatting",
		regexp.MustCompile(`^(?:mkfs(?:\.\w+)?|mke2fs|mkswap|mkdosfs|mkntfs|wipefs)(?:\s|$)`), false},
	{"block-device-write", "raw write to a block device",
		regexp.MustCompile(`(?:^dd\s.*\bof=/dev/|>\s*/dev/)(?:sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d|mmcblk\d|disk\d|dm-\d|md\d|loop\d)`), false},
	{"power", "host power control",
		regexp.MustCompile(`^(?:shutdown|reboot|halt|poweroff|telinit\s+[06]|init\s+[06]|systemctl\s+(?:\S+\s+)*?(?:poweroff|reboot|halt|suspend|hibernate|kexec)|loginctl\s+(?:poweroff|reboot))(?:\s|$)`), false},
	{"stop-service", "stopping host services",
		regexp.MustCompile(`^(?:systemctl\s+(?:\S+\s+)*?(?:stop|disable|mask|kill|isolate)|service\s+\S+\s+stop|killall5|pkill\s+(?:-\S+\s+)*(?:systemd|init|sshd|dockerd)\b)(?:\s|$)`), false},
	{"etc-overwrite", "overwriting /etc/passwd, /etc/shadow or /etc/sudoers",
		regexp.MustCompile(`(?:>\s*/etc/(?:passwd|shadow|sudoers)\b|^(?:tee|cp|mv|install|ln)\s(?:.*\s)?/etc/(?:passwd|shadow|sudoers)\s*$|^dd\s.*\bof=/etc/(?:passwd|shadow|sudoers)\b)`), false},
	{"chmod-777-root", "chmod 777 /",
		regexp.MustCompile(`^chmod\s+(?:-\S+\s+)*(?:0?777|a\+rwx|ugo\+rwx)\s+(?:-\S+\s+)*/(?:\s|$)`), false},
	{"pipe-to-shell", "piping into a shell or an interpreter",
		regexp.MustCompile(`^(?:sudo\s+)?(?:/usr)?(?:/bin/)?(?:sh|bash|zsh|dash|ksh|fish|ash|python[0-9.]*|perl[0-9.]*|ruby|node|nodejs|php[0-9.]*|lua[0-9.]*|tclsh|osascript)(?:\s+-\S*)*\s*$`), true},
	{"rm-root", "recursive delete of /",
		regexp.MustCompile(`^find\s+(?:\S+\s+)*?(?:/|~|\$HOME)\s+(?:.*\s)?-delete(?:\s|$)`), false},
	{"sudo", "sudo",
		regexp.MustCompile(`^(?:sudo|doas)(?:\s|$)`), false},
	{"netcat-exec", "netcat with -e",
		regexp.MustCompile(`^(?:nc|ncat|netcat|nc\.traditional|nc\.openbsd)\s+(?:\S+\s+)*?-[a-zA-Z]*[ec](?:\s|$)`), false},
}

// forkBomb catches `:(){ :|:& };:` and its renamed variants anywhere in the command.
var forkBomb = regexp.MustCompile(`([A-Za-z_:][A-Za-z0-9_:]*)\s*\(\s*\)\s*\{[^}]*\|\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*&[^}]*\}`)

// computedWord is a command word the policy cannot know before it runs.
var (
	computedWord = regexp.MustCompile(`^"?(?:\$[A-Za-z_{(]|\$\$|\x60)`)
	// substitutionAsCommand: `$(...)` or a backtick where a command word goes (after the start, a
	// separator, a keyword or assignments): `$(echo sudo) id`. Quote-unaware on purpose: a false positive
	// costs a rewrite, a false negative a bypass.
	substitutionAsCommand = regexp.MustCompile(`(?:^|[;&|\n(]|\bthen|\bdo|\belse)\s*(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*(?:eval\s+[^;&|\n]*[$\x60]|\$\(|\x60)`)
)

// assignmentPrefix and wrapperPrefix are stripped from a segment before rules match.
var (
	assignmentPrefix = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=(?:'[^']*'|"[^"]*"|\S*)\s+`)
	wrapperPrefix    = regexp.MustCompile(`^(?:exec(?:\s+-a\s*\S+|\s+-[cl]+)*|nohup|time(?:\s+-p)*|command(?:\s+-p)*|builtin|eval|busybox|setsid(?:\s+-\S+)*|stdbuf(?:\s+-\S+)*|xargs(?:\s+-\S+)*|nice(?:\s+-n\s*-?\d+|\s+-\d+)?|env(?:\s+(?:-u\s*|--unset[= ])\S+|\s+-\S+)*|timeout(?:\s+(?:-[sk]\s*|--signal[= ]|--kill-after[= ])\S+|\s+-\S+)*\s+\d\S*|then|do|else|elif|if|while|until|!|\{|\()\s+`)
	braceWord        = regexp.MustCompile(`^\{([^{}\s]*,[^{}\s]*)\}(\s|$)`)
	// redirectPrefix: bash accepts redirections before the command word (`>/dev/null sudo id`).
	redirectPrefix = regexp.MustCompile(`^(?:\d*|&)(?:>>|>&|<&|&>|>\||<>|>|<)\s*\S+\s+`)
	shellDashC     = regexp.MustCompile(`^(?:/usr)?(?:/bin/)?(?:sh|bash|zsh|dash|ksh|ash)\s+(?:-\S+\s+)*-[a-zA-Z]*c\s+`)
)

// builtinDenied returns the first built-in rule cmd breaks, or nil.
func builtinDenied(cmd string, depth int) *denyRule {
	// A backslash-newline is a line continuation: `sud\<newline>o` runs sudo.
	cmd = strings.ReplaceAll(cmd, "\\\n", "")
	// $IFS is a field separator: `sudo${IFS}id` runs sudo.
	cmd = strings.NewReplacer("${IFS}", " ", "$IFS", " ").Replace(cmd)
	if m := forkBomb.FindStringSubmatch(cmd); m != nil && m[1] == m[2] {
		return &denyRule{name: "fork-bomb", reason: "a fork bomb"}
	}
	if substitutionAsCommand.MatchString(cmd) {
		return &denyRule{name: "computed-command", reason: "the command word is computed when it runs ($(...) or backticks), so the policy cannot see what would run; write the command out"}
	}
	vars := map[string]string{} // NAME=word assignments seen so far in this line
	for _, sg := range splitCommand(cmd) {
		if v := assignmentOnly.FindStringSubmatch(sg.text); v != nil {
			if v[2] == "" { // x=$(...) or x=`...`: the value is computed, so unknown
				delete(vars, v[1])
			} else {
				vars[v[1]] = unquoteWords(v[2])
			}
			continue
		}
		raw := stripPrefixes(sg.text)
		if computedWord.MatchString(raw) {
			w, _ := firstWord(raw)
			name := strings.Trim(strings.TrimPrefix(w, "$"), "{}")
			val, known := vars[name]
			if !known || strings.ContainsAny(val, "$`") {
				return &denyRule{name: "computed-command", reason: "the command word is computed when it runs ($VAR, $(...) or backticks), so the policy cannot see what would run; write the command out"}
			}
			raw = stripPrefixes(val + raw[strings.Index(raw, w)+len(w):]) // x=sudo; $x id runs sudo
		}
		raw = normalizePaths(raw)
		text := raw
		// Quotes may hide a wrapper or a path (`"env" /usr/bin/sudo`): strip again on the unquoted words.
		for range 8 {
			t := stripPrefixes(unquoteWords(text))
			if t == text {
				break
			}
			text = t
		}
		for i := range builtinRules {
			r := &builtinRules[i]
			if r.afterPipe && sg.sep != "|" {
				continue
			}
			if r.seg.MatchString(text) {
				return r
			}
		}
		if depth < 4 {
			// sh -c '<script>' runs a script (after more options, or --): check it as a command of its own.
			if loc := shellDashC.FindStringIndex(raw); loc != nil {
				rest := raw[loc[1]:]
				for {
					w, ok := firstWord(rest)
					if !ok || !strings.HasPrefix(w, "-") {
						break
					}
					rest = strings.TrimLeft(rest, " \t")[len(w):] // an option after -c; the script follows
				}
				if script, ok := firstWord(rest); ok {
					if r := builtinDenied(script, depth+1); r != nil {
						return r
					}
				}
			}
			// find ... -exec CMD ... ; runs CMD for every file.
			if strings.HasPrefix(text, "find ") {
				if m := findExec.FindStringSubmatch(text); m != nil {
					if r := builtinDenied(m[1], depth+1); r != nil {
						return r
					}
				}
			}
		}
	}
	return nil
}

var (
	assignmentOnly = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)=('[^']*'|"[^"]*"|\S*)\s*$`)
	findExec       = regexp.MustCompile(`\s-(?:exec|execdir|ok|okdir)\s+(.*?)(?:\s+\\?;|\s+\+|$)`)
)

// normalizePaths writes every word that resolves to the root as the root itself: `//`, `/./`, `/../`
// are `/`, and `//*` is `/*`.
func normalizePaths(s string) string {
	words := strings.Fields(s)
	changed := false
	for i, w := range words {
		if len(w) > 1 && strings.HasPrefix(w, "/") {
			if c := path.Clean(w); c == "/" || c == "/*" {
				words[i], changed = c, true
			}
		}
	}
	if !changed {
		return s
	}
	return strings.Join(words, " ")
}

func stripPrefixes(s string) string {
	s = strings.TrimSpace(s)
	for {
		t := s
		if loc := assignmentPrefix.FindStringIndex(t); loc != nil {
			t = t[loc[1]:]
		}
		if loc := wrapperPrefix.FindStringIndex(t); loc != nil {
			t = t[loc[1]:]
		}
		if loc := redirectPrefix.FindStringIndex(t); loc != nil {
			t = t[loc[1]:]
		}
		if m := braceWord.FindStringSubmatch(t); m != nil {
			t = strings.ReplaceAll(m[1], ",", " ") + t[len(m[0])-len(m[2]):] // {sudo,id} runs `sudo id`
		}
		t = baseCommand(t)
		t = strings.TrimLeft(t, " \t")
		if t == s {
			return s
		}
		s = t
	}
}

// baseCommand reduces a command word given as a path (`/usr/bin/sudo`, `./../sbin/reboot`) to its
// base name, so the list matches however the binary is reached. Quoted words are left to the caller.
func baseCommand(s string) string {
	end := strings.IndexAny(s, " \t")
	if end < 0 {
		end = len(s)
	}
	w := s[:end]
	if !strings.Contains(w, "/") || strings.ContainsAny(w, "'\"\\<>=&") || strings.Trim(w, "/") == "" {
		return s
	}
	return path.Base(w) + s[end:]
}

// unquoteWords removes quotes and backslashes so `r”m -rf /` and `"sudo" x` are seen as written.
func unquoteWords(s string) string {
	var b strings.Builder
	var q byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case q == 0 && c == '$' && i+1 < len(s) && s[i+1] == '\'':
			i = ansiC(s, i+2, &b) // $'\x73udo' is sudo
		case q == 0 && c == '$' && i+1 < len(s) && s[i+1] == '"':
			i++
			q = '"'
		case q == 0 && (c == '\'' || c == '"'):
			q = c
		case q != 0 && c == q:
			q = 0
		case q != '\'' && c == '\\' && i+1 < len(s):
			i++
			b.WriteByte(s[i])
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// ansiC decodes the body of a $'...' word starting at i into b and returns the index of its closing
// quote (or the end of s).
func ansiC(s string, i int, b *strings.Builder) int {
	for ; i < len(s); i++ {
		c := s[i]
		if c == '\'' {
			return i
		}
		if c != '\\' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		digits := func(base, max int) {
			v, n := 0, 0
			for ; n < max && i+n < len(s); n++ {
				d := strings.IndexByte("0123456789abcdef", s[i+n]|0x20)
				if d < 0 || d >= base {
					break
				}
				v = v*base + d
			}
			if n == 0 {
				b.WriteByte(s[i-1])
				i--
				return
			}
			b.WriteRune(rune(v))
			i += n - 1
		}
		switch e := s[i]; e {
		case 'x':
			i++
			digits(16, 2)
		case 'u', 'U':
			i++
			digits(16, 8)
		case '0', '1', '2', '3', '4', '5', '6', '7':
			digits(8, 3)
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		default:
			b.WriteByte(e)
		}
	}
	return i
}

// firstWord returns the first shell word of s with its quotes removed.
func firstWord(s string) (string, bool) {
	s = strings.TrimLeft(s, " \t")
	if s == "" {
		return "", false
	}
	var b strings.Builder
	var q byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case q == 0 && (c == ' ' || c == '\t' || c == '\n'):
			return b.String(), true
		case q == 0 && (c == '\'' || c == '"'):
			q = c
		case q != 0 && c == q:
			q = 0
		case q != '\'' && c == '\\' && i+1 < len(s):
			i++
			b.WriteByte(s[i])
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

// segment is one simple command and the separator that preceded it.
type segment struct {
	sep  string
	text string
}

// splitCommand cuts a shell command line at command positions, outside quotes. Sub-commands in $( )
// and backticks become segments of their own.
func splitCommand(s string) []segment {
	var out []segment
	var cur strings.Builder
	sep := ""
	var q byte
	flush := func(next string) {
		if t := strings.TrimSpace(cur.String()); t != "" {
			out = append(out, segment{sep: sep, text: t})
		}
		cur.Reset()
		sep = next
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if q == '\'' {
			if c == '\'' {
				q = 0
			}
			cur.WriteByte(c)
			continue
		}
		if c == '\\' && i+1 < len(s) {
			cur.WriteByte(c)
			cur.WriteByte(s[i+1])
			i++
			continue
		}
		if q == '"' {
			switch {
			case c == '"':
				q = 0
				cur.WriteByte(c)
			case c == '$' && i+1 < len(s) && s[i+1] == '(':
				flush("$(")
				i++
			case c == '`':
				flush("`")
			case c == ')':
				flush(")")
			default:
				cur.WriteByte(c)
			}
			continue
		}
		switch {
		case c == '\'' || c == '"':
			q = c
			cur.WriteByte(c)
		case c == ';' || c == '\n' || c == '(' || c == ')' || c == '`':
			flush(string(c))
		case c == '$' && i+1 < len(s) && s[i+1] == '(':
			flush("$(")
			i++
		case c == '&' || c == '|':
			if i+1 < len(s) && s[i+1] == c {
				flush(string([]byte{c, c}))
				i++
			} else if c == '|' && i+1 < len(s) && s[i+1] == '&' {
				flush("|")
				i++
			} else if c == '&' && i > 0 && (s[i-1] == '>' || s[i-1] == '<') || c == '&' && i+1 < len(s) && s[i+1] == '>' {
				cur.WriteByte(c) // redirections 2>&1, &>file
			} else {
				flush(string(c))
			}
		default:
			cur.WriteByte(c)
		}
	}
	flush("")
	return out
}

// shellJoin renders an argv as one shell line so argv execs go through the same policy as strings.
func shellJoin(argv []string) string {
	parts := make([]string, len(argv))
	for i, a := range argv {
		parts[i] = shellQuote(a)
	}
	return strings.Join(parts, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
