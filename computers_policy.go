// computers_policy.go — the one command policy, evaluated for every exec (API, terminal, agent tool, MCP)
// and for a computer spec's setup snippet before its machine is created.
//
// Entry points: commandPolicy{Allow, Deny}.check(cmd) → nil or 403 E_EXEC_DENIED `refused: <reason>`
// with details.rule; setupRefused(setup, policy), the same check on a setup (it runs as `/bin/sh -c setup`,
// so it is judged as that exec would be), used by every creation (computerService.create) and by agent
// spec validation (`computer.setup`); Guardrails.policy, an agent's allowCommands/denyCommands.
// Order (DESIGN §4): allow patterns → allowed; deny patterns → denied; built-in deny list → denied. A
// pattern is a regular expression, or a substring when it does not compile.
//
// The built-in list matches only at command position (start, after `;`, `&`, `&&`, `||`, `|`, `$(`,
// backticks, `(`, `{`, newlines, and after the keywords then/do/else/if/while/until/!), so that
// `grep -r sudo .` and `echo shutdown >> notes` run. The scanner is quote-aware; `find -exec` and a
// shell's `-c` script (whatever flags come with it: -ce, -xc, -o pipefail -c, --) are checked recursively.
// Wrappers are stripped: the shell's (exec, command, time, eval, env) and the programs that run their
// operand, through their options (execWrappers: strace -o f, chroot DIR, flock FILE, timeout N, taskset
// MASK, ionice -c 3, ...; flock -c and script -c as `sh -c`). Long options abbreviated are not known.
// What the policy cannot see is refused (issue 25; rules computed-command, stdin-script and
// rm-root-unset, "opaque"): a recursive delete (rm -r, find -delete) that is rm-root once its expansions
// and substitutions are empty (`rm -rf "$DIR"/*`; a literal assigned earlier in the line counts);
// an expansion or substitution anywhere in a command word (`s${EMPTY}udo`, `"$(echo sudo)"`, `$@`) unless
// it is a variable assigned earlier in the line (and IFS left alone); a -c script the outer shell builds
// (`bash -c "$(echo sudo) id"`) or takes from elsewhere (xargs -I); a shell or interpreter reading its
// program from stdin (a pipe, a here-document, `/dev/stdin`, `/dev/fd/N`, `-`, no operand at all); in
// `ask` mode a human who approved the very call waives these (commandPolicy.Seen), and so does a person's
// interactive terminal session (ExecTTY: `agentd shell`, `exec -it`), nothing else. Any other
// expansion in an argument is fine (`echo $HOME`, `rm -rf "$d/cache"`), and so are a script file (`bash build.sh`,
// `bash < build.sh`) and another language's inline code (`python3 -c`): the caller's own code, which
// the policy does not read. Paths are judged as they resolve (`//`, `'/'`, `/usr/..` are `/`; `~//` is
// `~`). allowCommands allow only a simple command: `^git status` does not allow `git status; rm -rf /`.
// It is a guardrail against accidents and careless models, not a sandbox: the isolation is the container.
package main

import (
	"cmp"
	"path"
	"regexp"
	"slices"
	"strings"
)

// commandPolicy carries a caller's allow and deny patterns (an agent's allowCommands/denyCommands).
// Seen: a human approved this very call in `ask` mode (not `remember`), so what the policy cannot see was
// theirs to judge: the opaque rules are waived; what the policy sees on its lists still refuses.
type commandPolicy struct {
	Allow []string
	Deny  []string
	Seen  bool
}

// policy is an agent's guardrails as a command policy (no call approved: Seen false).
func (g Guardrails) policy() commandPolicy {
	return commandPolicy{Allow: g.AllowCommands, Deny: g.DenyCommands}
}

// setupRefused judges a spec's setup snippet before its machine exists, as an exec of it would be judged
// (no human approves a setup, so what the policy cannot see stays refused): nil, or 403 E_EXEC_DENIED
// `setup: refused: <reason>` with details.rule and details.field "setup". pol is the caller's: an agent's
// guardrails, or none at all (POST /v1/computers: the built-in list only).
func setupRefused(setup string, pol commandPolicy) *apiError {
	if strings.TrimSpace(setup) == "" {
		return nil
	}
	pol.Seen = false
	ae := pol.check(setup)
	if ae == nil {
		return nil
	}
	ae.Message = "setup: " + ae.Message
	switch r, _ := ae.Details["rule"].(string); r {
	case "computed-command", "stdin-script":
		ae.Hint = "write out what runs: no human approves a setup, so what the policy cannot see is refused"
	case "pipe-to-shell": // allowCommands vouch for a simple command only, never for a pipe
		ae.Hint = "download, then run the file: curl -fsSLo /tmp/install.sh URL && sh /tmp/install.sh"
	}
	return ae.withDetail("field", "setup")
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
	if r := builtinDenied(cmd, 0); r != nil && !(r.opaque() && p.Seen) {
		hint := "this command is on the built-in deny list; an agent's guardrails.allowCommands can allow it explicitly"
		if r.opaque() {
			hint = "write out what runs; in approvalMode ask a human who approves this very call (not remember) may let it run"
		}
		return errorf(codeExecDenied, "refused: %s", r.reason).withHint(hint).withDetail("rule", r.name)
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

// opaque: the rule refuses what the policy cannot see (rather than something it sees is forbidden).
func (r *denyRule) opaque() bool {
	return r.name == "computed-command" || r.name == "stdin-script" || r.name == "rm-root-unset"
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

var (
	// substitutionAsCommand: `$(...)` or a backtick where a command word goes (after the start, a
	// separator, a keyword or assignments): `$(echo sudo) id`. Quote-unaware on purpose: a false positive
	// costs a rewrite, a false negative a bypass.
	// The substitution may sit inside the word (`"$(echo sudo)" id`, `s$(echo u)do id`); a word holding `=`
	// before it is an assignment.
	substitutionAsCommand = regexp.MustCompile(`(?:^|[;&|\n(]|\bthen|\bdo|\belse)\s*(?:[A-Za-z_][A-Za-z0-9_]*=(?:[^\s$\x60]|\$[A-Za-z_{])*\s+)*(?:eval\s+[^;&|\n]*[$\x60]|[^\s;&|()=<>]*?(?:\$\(|\x60))`)
)

// assignmentPrefix and wrapperPrefix are stripped from a segment before rules match.
var (
	assignmentPrefix = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=(?:'[^']*'|"[^"]*"|\S*)\s+`)
	// wrapperPrefix: the shell's own keywords and builtins, and env (whose -S splits its value into the
	// command); the programs that run their operand are in execWrappers.
	wrapperPrefix = regexp.MustCompile(`^(?:exec(?:\s+-a\s*\S+|\s+-[cl]+)*(?:\s+--)?|time(?:\s+-p)*|command(?:\s+-p)*(?:\s+--)?|builtin|eval|env(?:\s+(?:-[uC]\s*|--unset[= ]|--chdir[= ])\S+|\s+-\S+)*|then|do|else|elif|if|while|until|!|\{|\()\s+`)
	braceWord     = regexp.MustCompile(`^\{([^{}\s]*,[^{}\s]*)\}(\s|$)`)
	// redirectPrefix: bash accepts redirections before the command word (`>/dev/null sudo id`).
	redirectPrefix = regexp.MustCompile(`^(?:\d*|&)(?:>>|>&|<&|&>|>\||<>|>|<)\s*\S+\s+`)
)

// execWrapper: how a program that runs its operand as a command takes its own arguments. short: the short
// options that take a value (`-o file`, `-ofile`); long: the long ones (`--output file`; `--x=v` always
// carries its value); operands: words before the command (chroot's NEWROOT, flock's file, timeout's
// duration, taskset's mask, chrt's priority); script: the option whose value is a shell script (flock
// -c, script -c), judged as `sh -c`; scriptOnly: nothing else runs (script's operand is its log file).
type execWrapper struct {
	short, long string
	operands    int
	script      string
	scriptOnly  bool
}

// execWrappers is a constant table (never mutated). Long options abbreviated (`--out x`) are not known.
var execWrappers = map[string]execWrapper{
	"nohup": {}, "busybox": {}, "setsid": {}, "unbuffer": {}, "catchsegv": {},
	"nice":    {short: "n", long: "adjustment"},
	"stdbuf":  {short: "ioe", long: "input output error"},
	"timeout": {short: "sk", long: "signal kill-after", operands: 1},
	"xargs":   {short: "adEILnPs", long: "arg-file delimiter max-lines max-args max-procs max-chars process-slot-var"},
	"strace": {short: "abeEIoOpPsSuUX", long: "output attach env signal status string-limit summary-sort-by summary-columns " +
		"user trace trace-path trace-fds columns abbrev verbose raw read write fault inject kvm const-print-style"},
	"ltrace":   {short: "aADeFlnopsuwx", long: "align config indent library output"},
	"chroot":   {long: "userspec groups", operands: 1},
	"taskset":  {operands: 1},
	"ionice":   {short: "cnpPu", long: "class classdata pid pgid uid"},
	"unshare":  {short: "SGRw", long: "setuid setgid root wd propagation setgroups map-user map-group map-users map-groups monotonic boottime"},
	"flock":    {short: "wEc", long: "wait timeout conflict-exit-code command", operands: 1, script: "c command"},
	"chrt":     {short: "TPD", long: "sched-runtime sched-period sched-deadline", operands: 1},
	"prlimit":  {short: "p", long: "pid"},
	"nsenter":  {short: "tSG", long: "target setuid setgid"},
	"setpriv":  {long: "reuid regid ruid euid rgid egid groups inh-caps ambient-caps bounding-set securebits pdeathsig selinux-label apparmor-profile"},
	"fakeroot": {short: "lsib", long: "lib faked"},
	"watch":    {short: "nq", long: "interval equexit"},
	"script":   {short: "cEIOTBm", long: "command echo log-in log-out log-timing log-io logging-format", script: "c command", scriptOnly: true},
}

// stripWrapper returns the command an execWrappers program at the start of s runs (`strace -o log sudo id`
// runs `sudo id`; `flock f -c 'x'` runs `sh -c 'x'`), or s when it runs none or is not one.
func stripWrapper(s string) string {
	name, ok := rawWord(s)
	spec, known := execWrappers[unquoteWords(name)]
	if !ok || !known {
		return s
	}
	rest := strings.TrimLeft(s, " \t\n")[len(name):]
	options, operands := true, spec.operands
	takes := func(o string) bool { return slices.Contains(strings.Fields(spec.long), o) }
	for {
		w, ok := rawWord(rest)
		if !ok {
			return s
		}
		u, next := unquoteWords(w), strings.TrimLeft(rest, " \t\n")[len(w):]
		switch {
		case options && u == "--":
			options = false
		case options && strings.HasPrefix(u, "--") && len(u) > 2:
			o, _, hasValue := strings.Cut(u[2:], "=")
			if spec.script != "" && slices.Contains(strings.Fields(spec.script)[1:], o) {
				if hasValue { // --command=x: cut it into -c x
					return "sh -c " + shellQuote(u[len(o)+3:]) + next
				}
				return "sh -c" + next
			}
			if v, ok := rawWord(next); ok && !hasValue && takes(o) {
				next = strings.TrimLeft(next, " \t\n")[len(v):]
			}
		case options && len(u) > 1 && u[0] == '-':
			for i := 1; i < len(u); i++ {
				if !strings.ContainsRune(spec.short, rune(u[i])) {
					continue
				}
				if spec.script != "" && u[i] == spec.script[0] {
					if i+1 < len(u) {
						return "sh -c " + shellQuote(u[i+1:]) + next
					}
					return "sh -c" + next
				}
				if i+1 == len(u) { // the value is the next word
					if v, ok := rawWord(next); ok {
						next = strings.TrimLeft(next, " \t\n")[len(v):]
					}
				}
				break
			}
		case spec.scriptOnly:
		case operands > 0:
			operands--
		default:
			return rest
		}
		rest = next
	}
}

// Rules for what the policy cannot see. All are "opaque": in `ask` mode a human who saw the call may
// let it run (runs_tools.go); everywhere else they refuse.
var (
	ruleComputed = denyRule{name: "computed-command",
		reason: "the command word is computed when it runs ($VAR, ${...}, $(...) or backticks), so the policy cannot see what would run; write the command out"}
	ruleScriptBuilt = denyRule{name: "computed-command",
		reason: "the script of a shell's -c is built when the line runs ($VAR, $(...) or backticks outside single quotes), or is not on the line; write it out in single quotes"}
	ruleStdinScript = denyRule{name: "stdin-script",
		reason: "a shell or interpreter reading its program from stdin (a pipe, a here-document, /dev/stdin, /dev/fd/N or the exec's stdin), so the policy cannot see what would run; save the script to a file and run the file"}
	ruleRmUnset = denyRule{name: "rm-root-unset",
		reason: "a recursive delete of / or the home when an expansion in its target is empty or unset (rm -rf \"$DIR\"/* is rm -rf /*); write the path out, or guard the variable: ${DIR:?}"}
	ruleTooDeep = denyRule{name: "computed-command",
		reason: "shells nested more than 4 deep; the policy does not look further"}
)

// ifsWord: the line assigns, reads or unsets IFS (the `$IFS` reads were replaced by a space before), so
// how an expansion splits into words is no longer known.
var ifsWord = regexp.MustCompile(`\bIFS\b`)

// builtinDenied returns the first built-in rule cmd breaks, or nil. A rule that sees something forbidden
// wins over an opaque one anywhere in the line, so that waiving the opaque ones (Seen) waives nothing else.
func builtinDenied(cmd string, depth int) *denyRule {
	if depth > 4 {
		return &ruleTooDeep
	}
	var opaque *denyRule
	visible := func(r *denyRule) *denyRule {
		if r != nil && r.opaque() {
			opaque = cmp.Or(opaque, r)
			return nil
		}
		return r
	}
	// A backslash-newline is a line continuation: `sud\<newline>o` runs sudo.
	cmd = strings.ReplaceAll(cmd, "\\\n", "")
	// $IFS is a field separator: `sudo${IFS}id` runs sudo.
	cmd = strings.NewReplacer("${IFS}", " ", "$IFS", " ").Replace(cmd)
	if m := forkBomb.FindStringSubmatch(cmd); m != nil && m[1] == m[2] {
		return &denyRule{name: "fork-bomb", reason: "a fork bomb"}
	}
	if substitutionAsCommand.MatchString(cmd) {
		visible(&ruleComputed)
	}
	ifsTouched := ifsWord.MatchString(cmd)
	if r := visible(rmEmptyTarget(cmd)); r != nil {
		return r
	}
	vars := map[string]string{} // NAME=word assignments seen so far in this line
	for _, sg := range splitCommand(cmd) {
		if noteAssignment(vars, sg.text) {
			continue
		}
		full, raw := sg.text, stripPrefixes(sg.text)
		// A segment after `)` continues the words of the command around a substitution (`echo $(date) $x`):
		// it is not in command position.
		if w, _ := rawWord(raw); sg.sep != ")" && hasExpansion(w) {
			val, known := vars[varRef(w)]
			if !known || ifsTouched || strings.ContainsAny(val, "$`") {
				visible(&ruleComputed)
				continue
			}
			raw = stripPrefixes(val + raw[len(w):]) // x=sudo; $x id runs sudo
			full = raw
		}
		text := normalizePaths(raw)
		// Quotes may hide a wrapper or a path (`"env" /usr/bin/sudo`, `rm -rf '//'`): strip again on the
		// unquoted words.
		for range 8 {
			t := normalizePaths(stripPrefixes(unquoteWords(text)))
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
		if r := visible(interpreterDenied(full, depth)); r != nil {
			return r
		}
		// find ... -exec CMD ... ; runs CMD for every file.
		if strings.HasPrefix(text, "find ") {
			if m := findExec.FindStringSubmatch(text); m != nil {
				if r := visible(builtinDenied(m[1], depth+1)); r != nil {
					return r
				}
			}
		}
	}
	return opaque
}

// noteAssignment records a segment that only assigns (`X=/tmp/x`) in vars, NAME → its unquoted value;
// a value computed when the line runs (`x=$(...)`, cut off by the split) makes NAME unknown again.
func noteAssignment(vars map[string]string, seg string) bool {
	v := assignmentOnly.FindStringSubmatch(seg)
	if v == nil {
		return false
	}
	if v[2] == "" {
		delete(vars, v[1])
	} else {
		vars[v[1]] = unquoteWords(v[2])
	}
	return true
}

// rmEmptyTarget judges every recursive delete in the line (rm -r, find -delete) with its expansions taken
// as empty, as an unset variable or a failed substitution leaves them: `rm -rf "$DIR"/*` is `rm -rf /*`.
// A variable assigned a literal earlier in the line counts as that literal; `${X:-w}` as w, `${X:?}` as
// not empty. Landing on / or the home is rm-root when every expansion was known, else the opaque
// rm-root-unset. Substitutions count as empty too (judged once more with them cut out of the line).
func rmEmptyTarget(cmd string) *denyRule {
	var unsure *denyRule
	for _, line := range slices.Compact([]string{cmd, dropSubstitutions(cmd)}) {
		vars := map[string]string{}
		for _, sg := range splitCommand(line) {
			if noteAssignment(vars, sg.text) {
				continue
			}
			words, known, expanded := rawWords(stripPrefixes(sg.text)), true, false
			for i, w := range words {
				if hasExpansion(w) {
					words[i], expanded = emptyExpansions(w, vars, &known), true
				} else {
					words[i] = unquoteWords(w)
				}
			}
			if !expanded { // judged as written by builtinDenied
				continue
			}
			text := normalizePaths(stripPrefixes(strings.Join(strings.Fields(strings.Join(words, " ")), " ")))
			for i := range builtinRules {
				if r := &builtinRules[i]; r.name == "rm-root" && r.seg.MatchString(text) {
					if known {
						return r
					}
					unsure = cmp.Or(unsure, &ruleRmUnset)
				}
			}
		}
	}
	return unsure
}

// emptyExpansions writes the raw word w unquoted with each expansion replaced by its value in vars, or
// by nothing (known turns false) when the value is not a literal the line assigned.
func emptyExpansions(w string, vars map[string]string, known *bool) string {
	var b strings.Builder
	value := func(name string) string {
		v, ok := vars[name]
		if !ok || strings.ContainsAny(v, "$`") {
			*known = false
			return ""
		}
		return v
	}
	var q byte
	for i := 0; i < len(w); i++ {
		c := w[i]
		switch {
		case q == '\'':
			if c == '\'' {
				q = 0
			} else {
				b.WriteByte(c)
			}
		case c == '\\' && i+1 < len(w):
			i++
			b.WriteByte(w[i])
		case q == 0 && c == '$' && i+1 < len(w) && w[i+1] == '\'':
			i = ansiC(w, i+2, &b)
		case c == '"' && q == 0, c == '\'' && q == 0:
			q = c
		case c == '"': // q is '"'
			q = 0
		case c == '$' && i+1 < len(w) && w[i+1] == '{':
			end := strings.IndexByte(w[i:], '}')
			if end < 0 {
				end = len(w) - i
			}
			inner := w[i+2 : min(i+end, len(w))]
			i += end
			m := paramForm.FindStringSubmatch(inner)
			switch {
			case m == nil:
				*known = false
			case m[2] == "" && m[3] == "":
				b.WriteString(value(m[1]))
			case m[2] == ":-" || m[2] == ":=":
				if v := value(m[1]); v != "" {
					b.WriteString(v)
				} else {
					b.WriteString(emptyExpansions(m[3], vars, known))
				}
			case m[2] == ":?":
				b.WriteString(cmp.Or(value(m[1]), "set")) // the shell stops the line when it is empty
			default: // ${X:+w}, ${X#p}, ${X/a/b}...: may be empty
				*known = false
			}
		case c == '$' && i+1 < len(w) && strings.IndexByte("?#$", w[i+1]) >= 0:
			i++
			b.WriteByte('0') // never empty
		case c == '$' && i+1 < len(w) && hasExpansion(w[i:i+2]):
			n := varName.FindString(w[i+1:])
			i += max(len(n), 1)
			if n != "" {
				b.WriteString(value(n))
			} else {
				*known = false // $1, $@, $*, $!, $-
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

var (
	varName   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*`)
	paramForm = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)(?:(:[-=?]|)(.*))?$`)
)

// dropSubstitutions replaces each $(...) and backtick substitution outside single quotes with an empty
// expansion, `${}`, so the words around it stay one word: `rm -rf "$(mktemp -d)"/*` is `rm -rf "${}"/*`.
func dropSubstitutions(s string) string {
	var b strings.Builder
	var q byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case q == '\'':
			if c == '\'' {
				q = 0
			}
		case c == '\\' && i+1 < len(s):
			b.WriteByte(c)
			i++
		case c == '"' && q == 0, c == '\'' && q == 0:
			q = c
		case c == '"': // q is '"'
			q = 0
		case c == '`':
			end := strings.IndexByte(s[i+1:], '`')
			if end < 0 {
				end = len(s) - i - 1
			}
			i += end + 1
			b.WriteString("${}")
			continue
		case c == '$' && i+1 < len(s) && s[i+1] == '(':
			depth := 0
			for i++; i < len(s); i++ {
				if s[i] == '(' {
					depth++
				} else if s[i] == ')' {
					if depth--; depth == 0 {
						break
					}
				}
			}
			b.WriteString("${}")
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

var (
	shellName  = regexp.MustCompile(`^(?:sh|bash|rbash|zsh|dash|ksh|mksh|pdksh|ash|yash|posh|fish)$`)
	interpName = regexp.MustCompile(`^(?:python[0-9.]*|pypy[0-9.]*|perl[0-9.]*|ruby[0-9.]*|node|nodejs|php[0-9.]*|lua[0-9.]*|luajit|tclsh[0-9.]*|osascript|deno|bun|Rscript|awk|gawk|mawk)$`)
	// stdinName: operands that name the program's stdin (`bash /dev/stdin`, `python3 /dev/fd/0`, `sh -`).
	stdinName = regexp.MustCompile(`^(?:-|/dev/stdin|/dev/fd/\d+|/proc/(?:self|thread-self|\d+)/fd/\d+)$`)
	// redirectWord: a redirection as one word (`<f`, `2>&1`, `<<EOF`) or its operator alone (`<`, `>`).
	redirectWord = regexp.MustCompile(`^(\d*|&)(<<<|<<-?|<>|<&|>>|>&|&>>?|>\||<|>)(.*)$`)
)

// interpreterDenied judges a segment that runs a shell or an interpreter: a shell's -c script is checked
// as a command of its own (and refused when the outer shell builds it); a program read from stdin cannot
// be seen and is refused. A program in a named file (`bash build.sh`, `bash < build.sh`) and inline code
// of another language (`python3 -c`, `perl -e`) are the caller's own code, which the policy does not read.
func interpreterDenied(raw string, depth int) *denyRule {
	rw := rawWords(raw)
	if len(rw) == 0 {
		return nil
	}
	// Judge wrappers and assignments on the unquoted words (`"env" "sh" -c ...`), then line the stripped
	// words up with the raw ones: stripping removes whole words from the front. A wrapper's script option
	// becomes `sh -c` (`flock f --command x`); where the words then differ, the canonical ones are judged.
	canon := make([]string, len(rw))
	for i, w := range rw {
		canon[i] = canonWord(w)
	}
	stripped := rawWords(stripPrefixes(strings.Join(canon, " ")))
	if len(stripped) == 0 {
		return nil
	}
	off := max(len(rw)-len(stripped), 0)
	if off+len(stripped) != len(rw) || !slices.Equal(stripped[1:], canon[off+1:]) {
		rw = append(canon[:off+1:off+1], stripped[1:]...)
	}
	name := path.Base(unquoteWords(stripped[0]))
	isShell := shellName.MatchString(name)
	if !isShell && !interpName.MatchString(name) {
		return nil
	}
	underXargs := slices.Contains(canon[:off], "xargs")
	// Arguments, with redirections taken out: where stdin comes from.
	var args, argsRaw []string
	stdinFile, stdinOpaque := false, false
	for i := off + 1; i < len(rw); i++ {
		m := redirectWord.FindStringSubmatch(unquoteWords(rw[i]))
		if m == nil || strings.HasPrefix(rw[i], "'") || strings.HasPrefix(rw[i], `"`) {
			args, argsRaw = append(args, unquoteWords(rw[i])), append(argsRaw, rw[i])
			continue
		}
		target := m[3]
		if target == "" && m[2] != "<&" && m[2] != ">&" {
			if i+1 < len(rw) {
				i++
				target = unquoteWords(rw[i])
			}
		}
		if m[1] != "" && m[1] != "0" {
			continue // another descriptor
		}
		switch m[2] {
		case "<<<", "<<", "<<-", "<&":
			stdinOpaque = true // a here-string, a here-document, a duplicated descriptor
		case "<", "<>":
			// a missing target is a process substitution the split cut off: `bash <(curl x)`
			if target == "" || stdinName.MatchString(target) || hasExpansion(target) {
				stdinOpaque = true
			} else {
				stdinFile = true
			}
		}
	}
	if isShell {
		dashC, fromStdin, info := false, false, false
		i := 0
	flags:
		for ; i < len(args); i++ {
			a := args[i]
			switch {
			case a == "--":
				i++
				break flags
			case a == "-":
				fromStdin = true
				i++
				break flags
			case strings.HasPrefix(a, "--"):
				switch a {
				case "--rcfile", "--init-file":
					i++
				case "--version", "--help":
					info = true
				}
			case len(a) > 1 && (a[0] == '-' || a[0] == '+'):
				dashC = dashC || strings.ContainsRune(a[1:], 'c')
				fromStdin = fromStdin || strings.ContainsRune(a[1:], 's')
				if strings.ContainsAny(a[1:], "oO") {
					i++ // -o pipefail, -euo pipefail: the option's argument
				}
			default:
				break flags
			}
		}
		if dashC {
			if i >= len(args) || underXargs {
				return &ruleScriptBuilt // the script comes from elsewhere (xargs -I, or nothing on the line)
			}
			r := builtinDenied(args[i], depth+1)
			if script := argsRaw[i]; (r == nil || r.opaque()) && (!quotesClosed(script) || hasExpansion(script)) {
				return &ruleScriptBuilt // what it shows is judged first: `sh -c "sudo $(x)"` is sudo
			}
			return r
		}
		if info {
			return nil
		}
		if i < len(args) && stdinName.MatchString(args[i]) {
			return &ruleStdinScript
		}
		if i < len(args) && hasExpansion(argsRaw[i]) {
			return &ruleComputed // `bash $script`: which program runs is computed
		}
		if (fromStdin || i >= len(args)) && (stdinOpaque || !stdinFile) {
			return &ruleStdinScript
		}
		return nil
	}
	// Another interpreter: inline code (-c, -e, -m, -r, -p ...) or a script file names its program; with
	// neither, or with a stdin name, it reads the program from stdin.
	operand, inline := -1, false
	for i, a := range args {
		if len(a) > 1 && a[0] == '-' {
			switch {
			case a == "--version" || a == "--help" || a == "-V" || a == "-v" || a == "-h" || a == "-VV":
				return nil
			case strings.HasPrefix(a, "--"):
				inline = inline || a == "--eval" || a == "--print" || a == "--command"
			default:
				inline = inline || strings.ContainsAny(a[1:], "ceEmrpf")
			}
			continue
		}
		operand = i
		break
	}
	switch {
	case inline:
		return nil
	case operand >= 0 && stdinName.MatchString(args[operand]):
		return &ruleStdinScript
	case operand >= 0:
		return nil
	case stdinOpaque || !stdinFile:
		return &ruleStdinScript
	}
	return nil
}

// canonWord writes a raw word so that the prefix rules see it unquoted: plain words bare, others in
// single quotes (an assignment keeps its NAME= bare).
func canonWord(w string) string {
	u := unquoteWords(w)
	if m := assignmentName.FindString(u); m != "" {
		return m + canonWord(u[len(m):])
	}
	if u == "" || strings.ContainsAny(u, " \t\n'\"\\$`;&|<>()") {
		return shellQuote(u)
	}
	return u
}

var assignmentName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// rawWords cuts s into shell words at unquoted blanks, keeping quotes and backslashes.
func rawWords(s string) []string {
	var out []string
	for {
		w, ok := rawWord(s)
		if !ok {
			return out
		}
		out = append(out, w)
		s = strings.TrimLeft(s, " \t\n")[len(w):]
	}
}

// rawWord returns the first shell word of s (after blanks) as written, quotes and backslashes kept.
func rawWord(s string) (string, bool) {
	s = strings.TrimLeft(s, " \t\n")
	if s == "" {
		return "", false
	}
	var q byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case q == 0 && (c == ' ' || c == '\t' || c == '\n'):
			return s[:i], true
		case q != '\'' && c == '\\' && i+1 < len(s):
			i++
		case q == 0 && (c == '\'' || c == '"'):
			q = c
		case q != 0 && c == q:
			q = 0
		}
	}
	return s, true
}

// quotesClosed: every quote opened in w is closed (a word the split cut at a substitution is not).
func quotesClosed(w string) bool {
	var q byte
	for i := 0; i < len(w); i++ {
		c := w[i]
		switch {
		case q != '\'' && c == '\\':
			i++
		case q == 0 && (c == '\'' || c == '"'):
			q = c
		case q != 0 && c == q:
			q = 0
		}
	}
	return q == 0
}

// hasExpansion: the raw word w holds a parameter expansion or a substitution outside single quotes
// (`s${EMPTY}udo`, `"$x"`, `$1`, `$@`, backticks); `$'...'` is a literal.
func hasExpansion(w string) bool {
	var q byte
	for i := 0; i < len(w); i++ {
		c := w[i]
		switch {
		case q == '\'':
			if c == '\'' {
				q = 0
			}
		case c == '\\':
			i++
		case c == '`':
			return true
		case c == '$' && i+1 < len(w):
			n := w[i+1]
			if q == 0 && n == '\'' { // $'...': skip to its closing quote
				for i += 2; i < len(w) && w[i] != '\''; i++ {
					if w[i] == '\\' {
						i++
					}
				}
				continue
			}
			if n == '_' || n >= 'a' && n <= 'z' || n >= 'A' && n <= 'Z' || n >= '0' && n <= '9' || strings.IndexByte("{(@*#?$!-", n) >= 0 {
				return true
			}
		case c == '"':
			if q == '"' {
				q = 0
			} else {
				q = '"'
			}
		case c == '\'' && q == 0:
			q = '\''
		}
	}
	return false
}

// varRef is NAME when the raw word w is exactly `$NAME`, `${NAME}` or either in double quotes, else "".
func varRef(w string) string {
	if m := varRefWord.FindStringSubmatch(w); m != nil {
		return m[1] + m[2]
	}
	return ""
}

var varRefWord = regexp.MustCompile(`^"?\$(?:([A-Za-z_][A-Za-z0-9_]*)|\{([A-Za-z_][A-Za-z0-9_]*)\})"?$`)

var (
	assignmentOnly = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)=('[^']*'|"[^"]*"|\S*)\s*$`)
	findExec       = regexp.MustCompile(`\s-(?:exec|execdir|ok|okdir)\s+(.*?)(?:\s+\\?;|\s+\+|$)`)
)

// normalizePaths writes every word that resolves to the root or the home as that root itself: `//`,
// `/./`, `/../`, `/usr/..` are `/`, `//*` is `/*`, `~//` is `~` and `$HOME/.` is `$HOME`.
func normalizePaths(s string) string {
	words := strings.Fields(s)
	changed := false
	for i, w := range words {
		for _, home := range []string{"~", "$HOME", "${HOME}", ""} {
			rest, ok := strings.CutPrefix(w, home)
			if !ok || rest == "" || rest[0] != '/' || home == "" && len(rest) < 2 {
				continue
			}
			if c := path.Clean(rest); c == "/" || c == "/*" {
				if home != "" {
					c = strings.TrimSuffix(home+c, "/")
				}
				if c != w {
					words[i], changed = c, true
				}
			}
			break
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
		t = stripWrapper(t)
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
	inBT := false
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
				flush(map[bool]string{false: "`", true: ")"}[inBT])
				inBT = !inBT
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
		case c == '`':
			flush(map[bool]string{false: "`", true: ")"}[inBT]) // a closing backtick ends a substitution like `)`
			inBT = !inBT
		case c == ';' || c == '\n' || c == '(' || c == ')':
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
