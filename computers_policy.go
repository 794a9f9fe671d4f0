// computers_policy.go — the one command policy, evaluated for every exec (API, terminal, agent tool).
//
// Entry point: commandPolicy{Allow, Deny}.check(cmd) → nil or 403 E_EXEC_DENIED `refused: <reason>`
// with details.rule. Order (DESIGN §4): allow patterns → allowed; deny patterns → denied; built-in deny
// list → denied. A pattern is a regular expression, or a substring when it does not compile.
//
// The built-in list matches only at command position (start, after `;`, `&`, `&&`, `||`, `|`, `$(`,
// backticks, `(`, `{`, newlines, and after the keywords then/do/else/if/while/until/!), so that
// `grep -r sudo .` and `echo shutdown >> notes` run. The scanner is quote-aware; `sh -c '<script>'` is
// checked recursively. It is a guardrail against accidents and careless models, not a sandbox: the
// isolation is the container.
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
	for _, pat := range p.Allow {
		if patternMatch(pat, cmd) {
			return nil
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
	{"pipe-to-shell", "piping into a shell",
		regexp.MustCompile(`^(?:sudo\s+)?(?:/usr)?(?:/bin/)?(?:sh|bash|zsh|dash|ksh|fish|ash)(?:\s+-\S+)*\s*$`), true},
	{"sudo", "sudo",
		regexp.MustCompile(`^(?:sudo|doas)(?:\s|$)`), false},
	{"netcat-exec", "netcat with -e",
		regexp.MustCompile(`^(?:nc|ncat|netcat|nc\.traditional|nc\.openbsd)\s+(?:\S+\s+)*?-[a-zA-Z]*[ec](?:\s|$)`), false},
}

// forkBomb catches `:(){ :|:& };:` and its renamed variants anywhere in the command.
var forkBomb = regexp.MustCompile(`([A-Za-z_:][A-Za-z0-9_:]*)\s*\(\s*\)\s*\{[^}]*\|\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*&[^}]*\}`)

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
	for _, sg := range splitCommand(cmd) {
		raw := stripPrefixes(sg.text)
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
		// sh -c '<script>' runs a script: check it as a command of its own.
		if depth < 4 {
			if loc := shellDashC.FindStringIndex(raw); loc != nil {
				if script, ok := firstWord(raw[loc[1]:]); ok {
					if r := builtinDenied(script, depth+1); r != nil {
						return r
					}
				}
			}
		}
	}
	return nil
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
