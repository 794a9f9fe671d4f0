// store.go — all persistent state, in one SQLite database through modernc.org/sqlite (pure Go).
//
// Entry points: openStore(path) and the domain-named methods of *store, grouped below by domain.
// Rules: pragmas live in the DSN (WAL, busy timeout, foreign keys, immediate write transactions);
// migrations are embedded, applied in order, and recorded in schema_migrations; a migration, once
// released, is never edited — add a new one. Acknowledged writes survive kill -9 (WAL, synchronous
// NORMAL: the write is in the OS before the call returns).
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"time"

	_ "modernc.org/sqlite"
)

// migrations are applied in order; their index+1 is the schema version recorded.
var migrations = []string{
	// 1: the initial schema.
	`
CREATE TABLE agents (
	name       TEXT PRIMARY KEY,
	yaml       TEXT NOT NULL,
	spec       TEXT NOT NULL,       -- JSON of the spec with defaults applied
	summary    TEXT NOT NULL DEFAULT '', -- JSON AgentSummary without updatedAt and runCount (fast listing)
	created_at TEXT NOT NULL,
	updated_at TEXT NOT NULL
);

CREATE TABLE computers (
	id           TEXT PRIMARY KEY,
	name         TEXT NOT NULL,
	provider     TEXT NOT NULL,
	state        TEXT NOT NULL,
	image        TEXT NOT NULL DEFAULT '',
	workdir      TEXT NOT NULL DEFAULT '/work',
	spec         TEXT NOT NULL,     -- JSON ComputerSpec with defaults applied
	ports        TEXT NOT NULL DEFAULT '{}',
	error        TEXT NOT NULL DEFAULT '',
	created_at   TEXT NOT NULL,
	last_used_at TEXT NOT NULL,
	expires_at   TEXT NOT NULL DEFAULT ''
);
CREATE INDEX computers_name ON computers(name);
CREATE INDEX computers_state ON computers(state);

CREATE TABLE runs (
	id          TEXT PRIMARY KEY,   -- run ids sort by time
	agent       TEXT NOT NULL,
	status      TEXT NOT NULL,
	summary     TEXT NOT NULL,      -- JSON RunSummary
	result      TEXT NOT NULL DEFAULT '', -- JSON RunResult once finished
	started_at  TEXT NOT NULL
);
CREATE INDEX runs_agent ON runs(agent, id);

CREATE TABLE run_events (
	run_id TEXT NOT NULL,
	seq    INTEGER NOT NULL,
	event  TEXT NOT NULL,           -- JSON run event
	PRIMARY KEY (run_id, seq)
);

CREATE TABLE memory (
	agent   TEXT NOT NULL,
	seq     INTEGER PRIMARY KEY AUTOINCREMENT,
	message TEXT NOT NULL           -- JSON ModelMessage
);
CREATE INDEX memory_agent ON memory(agent, seq);

CREATE TABLE transcripts (
	id         TEXT PRIMARY KEY,
	source     TEXT NOT NULL,
	title      TEXT NOT NULL DEFAULT '',
	created_at TEXT NOT NULL,
	body       TEXT NOT NULL        -- JSON Transcript
);
`,
	// 2: the cron ledger: the last minute each cron job fired, so a restart never fires it twice.
	`
CREATE TABLE cron_firings (
	job_id TEXT PRIMARY KEY,
	minute TEXT NOT NULL            -- RFC 3339 UTC, fixed width, so text order is time order
);
`,
	// 3: what the transcript listing shows without decoding bodies.
	`
ALTER TABLE transcripts ADD COLUMN message_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE transcripts ADD COLUMN updated_at TEXT NOT NULL DEFAULT '';
ALTER TABLE transcripts ADD COLUMN imported_at TEXT NOT NULL DEFAULT '';
CREATE INDEX transcripts_imported ON transcripts(imported_at);
`,
	// 4: a transcript's content hash, so importing the same content again returns the stored one (issue 26).
	`
ALTER TABLE transcripts ADD COLUMN content_hash TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX transcripts_content ON transcripts(content_hash) WHERE content_hash != '';
`,
	// 5: each agent's last test report (issue 31, runs_tests.go), for the dashboard's agent page.
	`
CREATE TABLE agent_tests (
	agent  TEXT PRIMARY KEY,
	report TEXT NOT NULL             -- the testReport as JSON
);
`,
}

type store struct {
	db  *sql.DB
	now func() time.Time

	agentList agentListCache // see ListAgentSummaries
}

// errNotFound is returned by store lookups that find nothing; callers map it to their domain's code.
var errNotFound = errors.New("not found")

func openStore(path string, now func() time.Time) (*store, error) {
	q := url.Values{}
	for _, p := range []string{"journal_mode(WAL)", "busy_timeout(10000)", "foreign_keys(1)", "synchronous(NORMAL)"} {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", "immediate")
	// The database holds spec env values and webhook secrets: owner-only, and SQLite gives its -wal and
	// -shm files the database file's mode.
	if f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600); err == nil {
		f.Close()
		os.Chmod(path, 0o600) // an older agentd created it 0644
	}
	for _, side := range []string{"-wal", "-shm"} {
		os.Chmod(path+side, 0o600)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open database %s: %w", path, err)
	}
	db.SetMaxOpenConns(8)
	st := &store{db: db, now: now}
	if err := st.migrate(context.Background()); err != nil {
		db.Close()
		return nil, err
	}
	return st, nil
}

func (st *store) Close() error { return st.db.Close() }

func (st *store) migrate(ctx context.Context) error {
	if _, err := st.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var have int
	if err := st.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version),0) FROM schema_migrations`).Scan(&have); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if have > len(migrations) {
		return fmt.Errorf("database schema version %d is newer than this agentd (%d); upgrade agentd", have, len(migrations))
	}
	for v := have + 1; v <= len(migrations); v++ {
		if err := st.applyMigration(ctx, v); err != nil {
			return fmt.Errorf("migrate to %d: %w", v, err)
		}
	}
	return nil
}

func (st *store) applyMigration(ctx context.Context, v int) error {
	tx, err := st.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, migrations[v-1]); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations(version, applied_at) VALUES (?, ?)`,
		v, timestamp(st.now())); err != nil {
		return err
	}
	return tx.Commit()
}

// queryRows runs a query and returns every row as scan reads it.
func queryRows[T any](ctx context.Context, db *sql.DB, scan func(*sql.Rows) (T, error), query string, args ...any) ([]T, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// noRow is errNotFound for a read that found no row.
func noRow(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return errNotFound
	}
	return err
}

// oneRow is errNotFound when a write touched no row.
func oneRow(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errNotFound
	}
	return nil
}

// ---- agents ----

type agentRow struct {
	Name        string
	YAML        string
	SpecJSON    string
	SummaryJSON string // filled by the store from SpecJSON when empty
	CreatedAt   string
	UpdatedAt   string
}

// withSummary fills SummaryJSON from SpecJSON, so every writer keeps the listing column right.
func (a agentRow) withSummary() agentRow {
	if a.SummaryJSON == "" {
		var spec AgentSpec
		if json.Unmarshal([]byte(a.SpecJSON), &spec) == nil {
			a.SummaryJSON = agentSummaryJSON(&spec)
		}
	}
	return a
}

// CreateAgent inserts a new agent; it reports false when the name is taken.
func (st *store) CreateAgent(ctx context.Context, a agentRow) (bool, error) {
	a = a.withSummary()
	res, err := st.db.ExecContext(ctx, `INSERT INTO agents(name, yaml, spec, summary, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(name) DO NOTHING`, a.Name, a.YAML, a.SpecJSON, a.SummaryJSON, a.CreatedAt, a.UpdatedAt)
	st.invalidateAgentList()
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// UpdateAgent replaces an existing agent's spec; errNotFound when there is none.
func (st *store) UpdateAgent(ctx context.Context, a agentRow) error {
	a = a.withSummary()
	res, err := st.db.ExecContext(ctx, `UPDATE agents SET yaml = ?, spec = ?, summary = ?, updated_at = ? WHERE name = ?`,
		a.YAML, a.SpecJSON, a.SummaryJSON, a.UpdatedAt, a.Name)
	st.invalidateAgentList()
	return oneRow(res, err)
}

func (st *store) GetAgent(ctx context.Context, name string) (agentRow, error) {
	var a agentRow
	err := st.db.QueryRowContext(ctx, `SELECT name, yaml, spec, created_at, updated_at FROM agents WHERE name = ?`, name).
		Scan(&a.Name, &a.YAML, &a.SpecJSON, &a.CreatedAt, &a.UpdatedAt)
	return a, noRow(err)
}

func (st *store) ListAgents(ctx context.Context) ([]agentRow, error) {
	return queryRows(ctx, st.db, func(r *sql.Rows) (a agentRow, err error) {
		err = r.Scan(&a.Name, &a.YAML, &a.SpecJSON, &a.CreatedAt, &a.UpdatedAt)
		return
	}, `SELECT name, yaml, spec, created_at, updated_at FROM agents ORDER BY name`)
}

// agentListCache keeps the result of ListAgentSummaries between agent writes. gen changes on every write,
// so a listing that raced a write is never kept.
type agentListCache struct {
	mu    sync.Mutex
	gen   uint64
	valid bool
	rows  []agentRow
}

func (st *store) invalidateAgentList() {
	c := &st.agentList
	c.mu.Lock()
	c.gen++
	c.valid, c.rows = false, nil
	c.mu.Unlock()
}

// ListAgentSummaries returns name, summary JSON and updatedAt of every agent, by name: the listing
// reads no spec, and is served from memory until the next agent write.
func (st *store) ListAgentSummaries(ctx context.Context) ([]agentRow, error) {
	c := &st.agentList
	c.mu.Lock()
	if c.valid {
		rows := c.rows
		c.mu.Unlock()
		return rows, nil // shared: callers only read it
	}
	gen := c.gen
	c.mu.Unlock()

	out, err := queryRows(ctx, st.db, func(r *sql.Rows) (a agentRow, err error) {
		err = r.Scan(&a.Name, &a.SummaryJSON, &a.UpdatedAt)
		return
	}, `SELECT name, summary, updated_at FROM agents ORDER BY name`)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.gen == gen {
		c.valid, c.rows = true, out
	}
	c.mu.Unlock()
	return out, nil
}

func (st *store) DeleteAgent(ctx context.Context, name string) error {
	res, err := st.db.ExecContext(ctx, `DELETE FROM agents WHERE name = ?`, name)
	st.invalidateAgentList()
	if err == nil { // a new agent of this name has not been tested yet
		st.db.ExecContext(ctx, `DELETE FROM agent_tests WHERE agent = ?`, name)
	}
	return oneRow(res, err)
}

// PutAgentTestReport keeps an agent's last test report (JSON), replacing the one before.
func (st *store) PutAgentTestReport(ctx context.Context, agent string, report []byte) error {
	_, err := st.db.ExecContext(ctx, `INSERT INTO agent_tests (agent, report) VALUES (?, ?)
		ON CONFLICT(agent) DO UPDATE SET report = excluded.report`, agent, string(report))
	return err
}

// AgentTestReport returns an agent's last test report, or errNotFound.
func (st *store) AgentTestReport(ctx context.Context, agent string) ([]byte, error) {
	var report string
	err := st.db.QueryRowContext(ctx, `SELECT report FROM agent_tests WHERE agent = ?`, agent).Scan(&report)
	return []byte(report), noRow(err)
}

// RunCountOf returns the number of recorded runs of one agent (an index lookup, not a scan).
func (st *store) RunCountOf(ctx context.Context, agent string) (int, error) {
	var n int
	err := st.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM runs WHERE agent = ?`, agent).Scan(&n)
	return n, err
}

// RunCounts returns the number of recorded runs per agent.
func (st *store) RunCounts(ctx context.Context) (map[string]int, error) {
	out := map[string]int{}
	_, err := queryRows(ctx, st.db, func(r *sql.Rows) (n int, err error) {
		var name string
		err = r.Scan(&name, &n)
		out[name] = n
		return
	}, `SELECT agent, COUNT(*) FROM runs GROUP BY agent`)
	return out, err
}

// ---- computers ----

// computerColumns is the column list every computer query reads, in computerRow order.
const computerColumns = `id, name, provider, state, image, workdir, spec, ports, error, created_at, last_used_at, expires_at`

func scanComputer(sc interface{ Scan(...any) error }) (ComputerInfo, error) {
	var m ComputerInfo
	var spec, ports string
	err := sc.Scan(&m.ID, &m.Name, &m.Provider, &m.State, &m.Image, &m.Workdir, &spec, &ports, &m.Error,
		&m.CreatedAt, &m.LastUsedAt, &m.ExpiresAt)
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal([]byte(spec), &m.Spec); err != nil {
		return m, fmt.Errorf("computer %s: stored spec: %w", m.ID, err)
	}
	m.Ports = map[string]PortBinding{}
	json.Unmarshal([]byte(ports), &m.Ports)
	return m, nil
}

func computerArgs(m ComputerInfo) []any {
	spec, _ := json.Marshal(m.Spec)
	if m.Ports == nil {
		m.Ports = map[string]PortBinding{}
	}
	ports, _ := json.Marshal(m.Ports)
	return []any{m.ID, m.Name, m.Provider, m.State, m.Image, m.Workdir, string(spec), string(ports), m.Error,
		m.CreatedAt, m.LastUsedAt, m.ExpiresAt}
}

func (st *store) InsertComputer(ctx context.Context, m ComputerInfo) error {
	_, err := st.db.ExecContext(ctx, `INSERT INTO computers(`+computerColumns+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)`,
		computerArgs(m)...)
	return err
}

// UpdateComputer writes every mutable field of a record.
func (st *store) UpdateComputer(ctx context.Context, m ComputerInfo) error {
	a := computerArgs(m)
	_, err := st.db.ExecContext(ctx, `UPDATE computers SET name=?, provider=?, state=?, image=?, workdir=?, spec=?,
		ports=?, error=?, created_at=?, last_used_at=?, expires_at=? WHERE id=?`, append(a[1:], a[0])...)
	return err
}

// TouchComputer records the last use of a machine.
func (st *store) TouchComputer(ctx context.Context, id, lastUsedAt string) error {
	_, err := st.db.ExecContext(ctx, `UPDATE computers SET last_used_at=? WHERE id=? AND last_used_at < ?`, lastUsedAt, id, lastUsedAt)
	return err
}

func (st *store) GetComputer(ctx context.Context, id string) (ComputerInfo, error) {
	m, err := scanComputer(st.db.QueryRowContext(ctx, `SELECT `+computerColumns+` FROM computers WHERE id = ?`, id))
	return m, noRow(err)
}

// ListComputers returns every record that is neither destroyed nor a warm-pool machine (state pooled,
// computers_pool.go), oldest first: every listing, lookup by name, the reaper and the agents' machines
// read this, so none of them ever sees a pool machine.
func (st *store) ListComputers(ctx context.Context) ([]ComputerInfo, error) {
	return queryRows(ctx, st.db, func(r *sql.Rows) (ComputerInfo, error) { return scanComputer(r) },
		`SELECT `+computerColumns+` FROM computers WHERE state NOT IN ('destroyed','pooled') ORDER BY created_at, id`)
}

// ListPooledComputers returns the warm pool's machines (state pooled), oldest first.
func (st *store) ListPooledComputers(ctx context.Context) ([]ComputerInfo, error) {
	return queryRows(ctx, st.db, func(r *sql.Rows) (ComputerInfo, error) { return scanComputer(r) },
		`SELECT `+computerColumns+` FROM computers WHERE state = 'pooled' ORDER BY created_at, id`)
}

// CountLiveComputers counts the machines the quota applies to: creating and running.
func (st *store) CountLiveComputers(ctx context.Context) (int, error) {
	var n int
	err := st.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM computers WHERE state IN ('creating','running')`).Scan(&n)
	return n, err
}

// ---- runs ----

// runWrite is one write of the run recorder: an event (Event set), or a run row (Summary set; Result set
// once the run finished). The recorder applies many in one transaction.
type runWrite struct {
	RunID   string
	Seq     int
	Event   []byte // JSON run event
	Agent   string
	Status  string
	Summary []byte // JSON RunSummary
	Result  []byte // JSON RunResult, when finished
	Started string
}

// WriteRunBatch applies writes in order in one transaction.
func (st *store) WriteRunBatch(ctx context.Context, ws []runWrite) error {
	tx, err := st.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var evStmt, runStmt *sql.Stmt
	for _, w := range ws {
		if w.RunID == "" { // a flush barrier, nothing to write
			continue
		}
		if w.Event != nil {
			if evStmt == nil {
				if evStmt, err = tx.PrepareContext(ctx, `INSERT OR REPLACE INTO run_events(run_id, seq, event) VALUES (?, ?, ?)`); err != nil {
					return err
				}
				defer evStmt.Close()
			}
			if _, err := evStmt.ExecContext(ctx, w.RunID, w.Seq, w.Event); err != nil {
				return err
			}
			continue
		}
		if runStmt == nil {
			if runStmt, err = tx.PrepareContext(ctx, `INSERT INTO runs(id, agent, status, summary, result, started_at)
				VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET status = excluded.status,
				summary = excluded.summary, result = excluded.result`); err != nil {
				return err
			}
			defer runStmt.Close()
		}
		if _, err := runStmt.ExecContext(ctx, w.RunID, w.Agent, w.Status, w.Summary, string(w.Result), w.Started); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// ListRuns pages runs newest first. before is the rowid bound of the previous page (0: from the newest);
// next is the bound of the following page, 0 when there is none.
func (st *store) ListRuns(ctx context.Context, agent string, limit int, before int64) (sums []json.RawMessage, next int64, err error) {
	q := `SELECT rowid, summary FROM runs WHERE 1=1`
	var args []any
	if agent != "" {
		q += ` AND agent = ?`
		args = append(args, agent)
	}
	if before > 0 {
		q += ` AND rowid < ?`
		args = append(args, before)
	}
	q += ` ORDER BY rowid DESC LIMIT ?`
	args = append(args, limit+1)
	type row struct {
		rowid int64
		sum   string
	}
	rows, err := queryRows(ctx, st.db, func(rs *sql.Rows) (r row, err error) {
		return r, rs.Scan(&r.rowid, &r.sum)
	}, q, args...)
	if err != nil {
		return nil, 0, err
	}
	if len(rows) > limit { // the extra row only says another page follows
		rows, next = rows[:limit], rows[limit-1].rowid
	}
	for _, r := range rows {
		sums = append(sums, json.RawMessage(r.sum))
	}
	return sums, next, nil
}

// GetRun returns a run's status, summary and result (empty while in flight).
func (st *store) GetRun(ctx context.Context, id string) (status string, summary, result []byte, err error) {
	var res string
	err = st.db.QueryRowContext(ctx, `SELECT status, summary, result FROM runs WHERE id = ?`, id).Scan(&status, &summary, &res)
	return status, summary, []byte(res), noRow(err)
}

// RunEvents returns a run's stored events in order.
func (st *store) RunEvents(ctx context.Context, id string) ([]json.RawMessage, error) {
	evs, err := st.RunEventsAfter(ctx, id, 0)
	out := make([]json.RawMessage, len(evs))
	for i, e := range evs {
		out[i] = e.Event
	}
	return out, err
}

// storedEvent is a run event with its sequence number (the SSE id of every stream of the run).
type storedEvent struct {
	Seq   int
	Event json.RawMessage
}

// RunEventsAfter returns a run's events with seq > after, in order.
func (st *store) RunEventsAfter(ctx context.Context, id string, after int) ([]storedEvent, error) {
	return queryRows(ctx, st.db, func(r *sql.Rows) (e storedEvent, err error) {
		var ev string
		err = r.Scan(&e.Seq, &ev)
		e.Event = json.RawMessage(ev)
		return
	}, `SELECT seq, event FROM run_events WHERE run_id = ? AND seq > ? ORDER BY seq`, id, after)
}

// DeleteRun removes a run and its events; errNotFound when there is none.
func (st *store) DeleteRun(ctx context.Context, id string) error {
	tx, err := st.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := oneRow(tx.ExecContext(ctx, `DELETE FROM runs WHERE id = ?`, id)); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM run_events WHERE run_id = ?`, id); err != nil {
		return err
	}
	return tx.Commit()
}

// RunningRuns returns the summaries of runs recorded as in flight (used at start to mark them aborted).
func (st *store) RunningRuns(ctx context.Context) (map[string][]byte, error) {
	out := map[string][]byte{}
	_, err := queryRows(ctx, st.db, func(r *sql.Rows) (sum []byte, err error) {
		var id string
		err = r.Scan(&id, &sum)
		out[id] = sum
		return
	}, `SELECT id, summary FROM runs WHERE status = 'running'`)
	return out, err
}

// NextRunEventSeq returns one past the highest stored event seq of a run.
func (st *store) NextRunEventSeq(ctx context.Context, id string) (int, error) {
	var n int
	err := st.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) + 1 FROM run_events WHERE run_id = ?`, id).Scan(&n)
	return n, err
}

// ---- triggers ----

// claimCronFiring records that jobID fires at minute; false when that minute (or a later one) was
// already claimed — by this process or by one that ran before a restart.
func (st *store) claimCronFiring(ctx context.Context, jobID string, minute time.Time) (bool, error) {
	m := minute.UTC().Format(time.RFC3339)
	res, err := st.db.ExecContext(ctx, `INSERT INTO cron_firings(job_id, minute) VALUES (?, ?)
		ON CONFLICT(job_id) DO UPDATE SET minute = excluded.minute WHERE cron_firings.minute < excluded.minute`, jobID, m)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// ---- memory ----

// LoadMemory returns the last max messages remembered for an agent, oldest first.
func (st *store) LoadMemory(ctx context.Context, agent string, max int) ([]ModelMessage, error) {
	raws, err := queryRows(ctx, st.db, func(r *sql.Rows) (raw []byte, err error) {
		err = r.Scan(&raw)
		return
	}, `SELECT message FROM (SELECT seq, message FROM memory WHERE agent = ? ORDER BY seq DESC LIMIT ?) ORDER BY seq`,
		agent, max)
	var out []ModelMessage
	for _, raw := range raws {
		if msg, err := parseMessage(raw); err == nil {
			out = append(out, msg)
		}
	}
	return out, err
}

// AppendMemory stores messages for an agent in one transaction.
func (st *store) AppendMemory(ctx context.Context, agent string, msgs []ModelMessage) error {
	tx, err := st.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, m := range msgs {
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO memory(agent, message) VALUES (?, ?)`, agent, string(b)); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// ---- transcripts ----

// TranscriptSummary is one row of GET /v1/sessions.
type TranscriptSummary struct {
	ID           string `json:"id"`
	Source       string `json:"source"`
	Title        string `json:"title"`
	MessageCount int    `json:"messageCount"`
	CreatedAt    string `json:"createdAt,omitempty"`
	UpdatedAt    string `json:"updatedAt,omitempty"`
	ImportedAt   string `json:"importedAt"`
}

// SaveTranscript stores an imported transcript, stamping its import time into Meta, and returns what is
// stored: t, or the transcript already stored with the same content hash (then t is not saved again).
func (st *store) SaveTranscript(ctx context.Context, t *Transcript, hash string) (*Transcript, error) {
	imported := timestamp(st.now())
	if t.Meta == nil {
		t.Meta = map[string]any{}
	}
	t.Meta["importedAt"] = imported
	b, err := json.Marshal(t)
	if err != nil {
		return nil, err
	}
	// ON CONFLICT: two imports of one content at once store it once (the partial unique index).
	res, err := st.db.ExecContext(ctx, `INSERT INTO transcripts(id, source, title, created_at, body, message_count, updated_at, imported_at, content_hash)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`, t.ID, t.Source, t.Title, t.CreatedAt, b, len(t.Messages), t.UpdatedAt, imported, hash)
	if err != nil {
		return nil, err
	}
	if n, _ := res.RowsAffected(); n == 1 || hash == "" {
		return t, nil
	}
	var id string
	if err := st.db.QueryRowContext(ctx, `SELECT id FROM transcripts WHERE content_hash = ?`, hash).Scan(&id); err != nil {
		return nil, err
	}
	return st.GetTranscript(ctx, id)
}

// GetTranscript reads a stored transcript; an unknown id is 404 E_TRANSCRIPT_NOT_FOUND.
func (st *store) GetTranscript(ctx context.Context, id string) (*Transcript, error) {
	var body string
	err := st.db.QueryRowContext(ctx, `SELECT body FROM transcripts WHERE id = ?`, id).Scan(&body)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errTranscriptNotFound(id)
	}
	if err != nil {
		return nil, err
	}
	var t Transcript
	if err := json.Unmarshal([]byte(body), &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// ListTranscripts lists stored transcripts, newest import first.
func (st *store) ListTranscripts(ctx context.Context, limit int) ([]TranscriptSummary, error) {
	out, err := queryRows(ctx, st.db, func(r *sql.Rows) (t TranscriptSummary, err error) {
		err = r.Scan(&t.ID, &t.Source, &t.Title, &t.MessageCount, &t.CreatedAt, &t.UpdatedAt, &t.ImportedAt)
		return
	}, `SELECT id, source, title, message_count, created_at, updated_at, imported_at
		FROM transcripts ORDER BY imported_at DESC, id DESC LIMIT ?`, limit)
	if out == nil && err == nil {
		out = []TranscriptSummary{}
	}
	return out, err
}
