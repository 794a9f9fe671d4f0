// cli_sessions.go — `agentd sessions`: the transcripts stored on the server (GET /v1/sessions), newest
// import first.
//
// Entry point: (*cli).sessions, named in cliCommands (cli.go).
// Rules (DESIGN §8): a table by default (ID, SOURCE, MESSAGES, IMPORTED, TITLE); --json prints the API's
// body unchanged; -q prints only the ids (for `agentd distill $(agentd sessions -q | head -1)`).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
	"time"
)

func (c *cli) sessions(args []string) error {
	var limit int
	var quiet bool
	if _, err := c.flags(args, func(fs *flag.FlagSet) {
		fs.IntVar(&limit, "limit", 100, "at most this many transcripts (1-500)")
		c.jsonFlag(fs)
		fs.BoolVar(&quiet, "q", false, "print only the transcript ids")
	}, 0, 0); err != nil {
		return err
	}
	var raw json.RawMessage
	if err := c.call("GET", "/v1/sessions"+queryOf("limit", strconv.Itoa(limit)), nil, &raw); err != nil {
		return err
	}
	if c.asJSON {
		return c.printJSON(raw)
	}
	var out struct{ Sessions []TranscriptSummary }
	if err := json.Unmarshal(raw, &out); err != nil {
		return fmt.Errorf("the server's session list is not JSON: %v", err)
	}
	if quiet {
		for _, s := range out.Sessions {
			fmt.Fprintln(c.stdout, s.ID)
		}
		return nil
	}
	now := time.Now()
	rows := [][]string{}
	for _, s := range out.Sessions {
		rows = append(rows, []string{s.ID, s.Source, strconv.Itoa(s.MessageCount), ago(s.ImportedAt, now), s.Title})
	}
	c.table([]string{"ID", "SOURCE", "MESSAGES", "IMPORTED", "TITLE"}, rows)
	return nil
}
