package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestStorePragmasAndMigrations(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentd.db")
	st, err := openStore(path, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	// Every pooled connection carries the DSN pragmas: hold several at once and ask each.
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		conn, err := st.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var mode string
		var fk, busy, sync int
		conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode)
		conn.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk)
		conn.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy)
		conn.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync)
		if mode != "wal" || fk != 1 || busy != 10000 || sync != 1 {
			t.Fatalf("conn %d: journal_mode=%s foreign_keys=%d busy_timeout=%d synchronous=%d", i, mode, fk, busy, sync)
		}
	}
	var versions int
	st.db.QueryRow("SELECT COUNT(*) FROM schema_migrations").Scan(&versions)
	if versions != len(migrations) {
		t.Fatalf("%d migrations recorded, %d exist", versions, len(migrations))
	}
	st.Close()

	// Reopening applies nothing twice.
	st, err = openStore(path, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	st.db.QueryRow("SELECT COUNT(*) FROM schema_migrations").Scan(&versions)
	if versions != len(migrations) {
		t.Fatalf("reopen recorded %d migrations", versions)
	}
	// A database from a newer agentd is refused with a clear message.
	st.db.Exec("INSERT INTO schema_migrations(version, applied_at) VALUES (999, 'x')")
	st.Close()
	if _, err := openStore(path, time.Now); err == nil || !strings.Contains(err.Error(), "newer than this agentd") {
		t.Fatalf("newer schema: %v", err)
	}
}

func TestStoreAgents(t *testing.T) {
	st, err := openStore(filepath.Join(t.TempDir(), "agentd.db"), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	row := agentRow{Name: "a", YAML: "name: a\n", SpecJSON: `{"name":"a","tools":["x"]}`, CreatedAt: "t1", UpdatedAt: "t1"}
	if ok, err := st.CreateAgent(ctx, row); !ok || err != nil {
		t.Fatalf("create: %v %v", ok, err)
	}
	if ok, err := st.CreateAgent(ctx, row); ok || err != nil {
		t.Fatalf("duplicate create: %v %v", ok, err)
	}
	// The store fills the listing summary itself.
	sums, _ := st.ListAgentSummaries(ctx)
	if len(sums) != 1 || !strings.Contains(sums[0].SummaryJSON, `"tools":["x"]`) {
		t.Fatalf("summaries %+v", sums)
	}
	row.YAML, row.UpdatedAt = "name: a\nmodel: free\n", "t2"
	if err := st.UpdateAgent(ctx, row); err != nil {
		t.Fatal(err)
	}
	got, err := st.GetAgent(ctx, "a")
	if err != nil || got.YAML != row.YAML || got.CreatedAt != "t1" || got.UpdatedAt != "t2" {
		t.Fatalf("get %+v %v", got, err)
	}
	if err := st.UpdateAgent(ctx, agentRow{Name: "zz"}); err != errNotFound {
		t.Fatalf("update missing: %v", err)
	}
	if err := st.DeleteAgent(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteAgent(ctx, "a"); err != errNotFound {
		t.Fatalf("delete missing: %v", err)
	}
	if _, err := st.GetAgent(ctx, "a"); err != errNotFound {
		t.Fatalf("get deleted: %v", err)
	}
	if counts, err := st.RunCounts(ctx); err != nil || len(counts) != 0 {
		t.Fatalf("run counts %v %v", counts, err)
	}
	// Runs are the runs concern's rows; two of agent b, one of c.
	for i, agent := range []string{"b", "b", "c"} {
		if _, err := st.db.Exec(`INSERT INTO runs(id, agent, status, summary, started_at) VALUES (?, ?, 'complete', '{}', 't')`,
			"run_"+string(rune('0'+i)), agent); err != nil {
			t.Fatal(err)
		}
	}
	counts, _ := st.RunCounts(ctx)
	if counts["b"] != 2 || counts["c"] != 1 || len(counts) != 2 {
		t.Fatalf("run counts %v", counts)
	}
	if n, err := st.RunCountOf(ctx, "b"); n != 2 || err != nil {
		t.Fatalf("RunCountOf(b) = %d %v", n, err)
	}
	if n, _ := st.RunCountOf(ctx, "zz"); n != 0 {
		t.Fatalf("RunCountOf(zz) = %d", n)
	}
}

// The cron ledger claims a job's minute once, also for a second store over the same file (a restart).
func TestClaimCronFiring(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentd.db")
	st, err := openStore(path, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m := time.Date(2026, 11, 23, 10, 7, 0, 0, time.UTC)
	if ok, err := st.claimCronFiring(ctx, "cron_a", m); !ok || err != nil {
		t.Fatalf("first claim: %v %v", ok, err)
	}
	if ok, _ := st.claimCronFiring(ctx, "cron_a", m); ok {
		t.Fatal("the same minute claimed twice")
	}
	if ok, _ := st.claimCronFiring(ctx, "cron_b", m); !ok {
		t.Fatal("another job's minute refused")
	}
	st.Close()
	st, err = openStore(path, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if ok, _ := st.claimCronFiring(ctx, "cron_a", m); ok {
		t.Fatal("claimed again after a restart")
	}
	if ok, _ := st.claimCronFiring(ctx, "cron_a", m.Add(-time.Minute)); ok {
		t.Fatal("an earlier minute claimed after a later one")
	}
	if ok, _ := st.claimCronFiring(ctx, "cron_a", m.Add(time.Minute)); !ok {
		t.Fatal("the next minute refused")
	}
}
