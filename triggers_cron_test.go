package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestCronNext: expressions and their next firing after a given instant. The UTC rows were computed by a
// separate minute-by-minute implementation of Vixie cron's rules; the DST rows by hand.
func TestCronNext(t *testing.T) {
	rows := []struct{ expr, from, want string }{
		{"CRON_TZ=UTC * * * * *", "2026-11-23T10:07:00Z", "2026-11-23T10:08:00Z"},
		{"CRON_TZ=UTC * * * * *", "2026-11-23T10:07:30Z", "2026-11-23T10:08:00Z"},
		{"CRON_TZ=UTC 0 * * * *", "2026-11-23T10:07:00Z", "2026-11-23T11:00:00Z"},
		{"CRON_TZ=UTC @hourly", "2026-11-23T10:00:00Z", "2026-11-23T11:00:00Z"},
		{"CRON_TZ=UTC @daily", "2026-11-23T10:07:00Z", "2026-11-24T00:00:00Z"},
		{"CRON_TZ=UTC @midnight", "2026-11-23T23:59:00Z", "2026-11-24T00:00:00Z"},
		{"CRON_TZ=UTC @weekly", "2026-11-23T10:07:00Z", "2026-11-29T00:00:00Z"},
		{"CRON_TZ=UTC @monthly", "2026-11-23T10:07:00Z", "2026-12-01T00:00:00Z"},
		{"CRON_TZ=UTC @yearly", "2026-11-23T10:07:00Z", "2027-01-01T00:00:00Z"},
		{"CRON_TZ=UTC @annually", "2026-12-31T23:59:00Z", "2027-01-01T00:00:00Z"},
		{"CRON_TZ=UTC */15 * * * *", "2026-11-23T10:07:00Z", "2026-11-23T10:15:00Z"},
		{"CRON_TZ=UTC */15 9-17 * * mon-fri", "2026-11-23T17:50:00Z", "2026-11-24T09:00:00Z"},
		{"CRON_TZ=UTC */15 9-17 * * mon-fri", "2026-11-27T17:46:00Z", "2026-11-30T09:00:00Z"},
		{"CRON_TZ=UTC 0 0 29 2 *", "2026-11-23T10:07:00Z", "2028-02-29T00:00:00Z"},
		{"CRON_TZ=UTC 0 0 1,15 * 5", "2026-11-23T10:07:00Z", "2026-11-27T00:00:00Z"},
		{"CRON_TZ=UTC 0 0 1,15 * 5", "2026-11-27T00:00:00Z", "2026-12-01T00:00:00Z"},
		{"CRON_TZ=UTC 30 4 1 * 0", "2026-11-23T10:07:00Z", "2026-11-29T04:30:00Z"},
		{"CRON_TZ=UTC 0 12 * * 7", "2026-11-23T10:07:00Z", "2026-11-29T12:00:00Z"},
		{"CRON_TZ=UTC 0 12 * * 0", "2026-11-23T10:07:00Z", "2026-11-29T12:00:00Z"},
		{"CRON_TZ=UTC 0 12 * * sun", "2026-11-23T10:07:00Z", "2026-11-29T12:00:00Z"},
		{"CRON_TZ=UTC 0 12 * * SAT", "2026-11-23T10:07:00Z", "2026-11-28T12:00:00Z"},
		{"CRON_TZ=UTC 0 9 * jan,jul *", "2026-11-23T10:07:00Z", "2027-01-01T09:00:00Z"},
		{"CRON_TZ=UTC 0 9 * JAN-MAR *", "2026-11-23T10:07:00Z", "2027-01-01T09:00:00Z"},
		{"CRON_TZ=UTC 5/10 * * * *", "2026-11-23T10:07:00Z", "2026-11-23T10:15:00Z"},
		{"CRON_TZ=UTC 1-30/7 * * * *", "2026-11-23T10:25:00Z", "2026-11-23T10:29:00Z"},
		{"CRON_TZ=UTC 0 */6 * * *", "2026-11-23T10:07:00Z", "2026-11-23T12:00:00Z"},
		{"CRON_TZ=UTC 0 0 */10 * *", "2026-11-23T10:07:00Z", "2026-12-01T00:00:00Z"},
		{"CRON_TZ=UTC 0 0 31 * *", "2026-11-23T10:07:00Z", "2026-12-31T00:00:00Z"},
		{"CRON_TZ=UTC 0 0 31 4 *", "2026-11-23T10:07:00Z", ""},
		{"CRON_TZ=UTC 59 23 31 12 *", "2026-11-23T10:07:00Z", "2026-12-31T23:59:00Z"},
		{"CRON_TZ=UTC 0 0 1 1 *", "2026-12-31T23:59:59Z", "2027-01-01T00:00:00Z"},
		{"CRON_TZ=UTC 15 14 1 * *", "2026-11-01T14:15:00Z", "2026-12-01T14:15:00Z"},
		{"CRON_TZ=UTC 0 22 * * 1-5", "2026-11-27T22:00:00Z", "2026-11-30T22:00:00Z"},
		{"CRON_TZ=UTC 0 0 * * 5-7", "2026-11-23T10:07:00Z", "2026-11-27T00:00:00Z"},
		{"CRON_TZ=UTC 0 0 * * 6,7", "2026-11-23T10:07:00Z", "2026-11-28T00:00:00Z"},
		{"CRON_TZ=UTC 23 0-20/2 * * *", "2026-11-23T10:07:00Z", "2026-11-23T10:23:00Z"},
		{"CRON_TZ=UTC 0 0 13 * 5", "2026-11-23T10:07:00Z", "2026-11-27T00:00:00Z"},
		{"CRON_TZ=UTC 0 0 */2 * 1", "2026-11-23T10:07:00Z", "2026-12-07T00:00:00Z"},
		{"CRON_TZ=UTC 0 0 1 */3 *", "2026-11-23T10:07:00Z", "2027-01-01T00:00:00Z"},
		{"CRON_TZ=UTC 0,30 * * * *", "2026-11-23T10:30:00Z", "2026-11-23T11:00:00Z"},
		{"CRON_TZ=UTC 0 0 29 2 1", "2026-11-23T10:07:00Z", "2027-02-01T00:00:00Z"},
		{"CRON_TZ=UTC 7 7 7 7 *", "2026-11-23T10:07:00Z", "2027-07-07T07:07:00Z"},
		{"CRON_TZ=UTC 0 0 28-31 2 *", "2027-02-27T10:00:00Z", "2027-02-28T00:00:00Z"},
		{"CRON_TZ=UTC 45 23 * * sat,sun", "2026-11-23T10:07:00Z", "2026-11-28T23:45:00Z"},
		{"CRON_TZ=UTC * 0 1 1 *", "2026-12-31T23:59:00Z", "2027-01-01T00:00:00Z"},
		// America/New_York springs forward on 2026-03-08 (02:00 EST → 03:00 EDT) and falls back on
		// 2026-11-01 (02:00 EDT → 01:00 EST).
		{"CRON_TZ=America/New_York 30 2 * * *", "2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z"}, // skipped: once, right after the gap
		{"CRON_TZ=America/New_York 30 2 * * *", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}, // not twice
		{"CRON_TZ=America/New_York 0 9 * * *", "2026-03-07T15:00:00Z", "2026-03-08T13:00:00Z"},  // 09:00 EDT
		{"CRON_TZ=America/New_York */30 * * * *", "2026-03-08T06:45:00Z", "2026-03-08T07:00:00Z"},
		{"CRON_TZ=America/New_York */30 * * * *", "2026-03-08T07:00:00Z", "2026-03-08T07:30:00Z"},
		{"CRON_TZ=America/New_York 30 1 * * *", "2026-11-01T04:00:00Z", "2026-11-01T05:30:00Z"},   // 01:30 EDT, the first one
		{"CRON_TZ=America/New_York 30 1 * * *", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"},   // the repeat does not fire
		{"CRON_TZ=America/New_York */30 * * * *", "2026-11-01T05:45:00Z", "2026-11-01T07:00:00Z"}, // 02:00 EST: the repeated hour once
		{"CRON_TZ=America/New_York 0 0 * * *", "2026-10-31T12:00:00Z", "2026-11-01T04:00:00Z"},
		{"CRON_TZ=Europe/Berlin 0 12 * * *", "2026-11-23T10:07:00Z", "2026-11-23T11:00:00Z"},
		{"CRON_TZ=Asia/Kolkata 0 0 * * *", "2026-11-23T10:07:00Z", "2026-11-23T18:30:00Z"},
	}
	if len(rows) < 40 {
		t.Fatalf("only %d rows", len(rows))
	}
	for _, r := range rows {
		c, err := parseCron(r.expr)
		if err != nil {
			t.Errorf("%s: %v", r.expr, err)
			continue
		}
		from, _ := time.Parse(time.RFC3339, r.from)
		got := c.next(from)
		gotS := ""
		if !got.IsZero() {
			gotS = got.UTC().Format(time.RFC3339)
		}
		if gotS != r.want {
			t.Errorf("%q after %s: got %q, want %q", r.expr, r.from, gotS, r.want)
		}
	}
}

func TestCronInvalid(t *testing.T) {
	for expr, want := range map[string]string{
		"61 * * * *":                     `minute field "61": value 61 is out of range 0-59`,
		"* 24 * * *":                     `hour field "24"`,
		"* * 0 * *":                      `day-of-month field "0"`,
		"* * * 13 *":                     `month field "13"`,
		"* * * * 8":                      `day-of-week field "8": value 8 is out of range 0-7`,
		"*/0 * * * *":                    `minute field "*/0": step "0" must be a positive number`,
		"5-1 * * * *":                    `range 5-1 runs backwards`,
		"* * * * * *":                    "expected 5 fields",
		"* * * *":                        "found 4",
		"":                               "found 0",
		"@reboot":                        "not a supported macro",
		"CRON_TZ=Nowhere/City * * * * *": "not a known time zone",
		"a * * * *":                      `minute field "a": "a" is not a number`,
		"1,,2 * * * *":                   "empty list item",
		"* * * foo *":                    `"foo" is not a number or a name (jan..dec)`,
		"* * * * mon-":                   `day-of-week field "mon-"`,
		"1-2-3 * * * *":                  `minute field "1-2-3"`,
	} {
		_, err := parseCron(expr)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", expr, err, want)
		}
	}
}

// FuzzCron: the parser never panics, and a parsed schedule's next firing is after its input.
func FuzzCron(f *testing.F) {
	for _, s := range []string{"* * * * *", "*/15 9-17 * * mon-fri", "0 0 29 2 *", "@weekly", "0 0 1,15 * 5",
		"CRON_TZ=America/New_York 30 2 * * *", "5/10 1-3 */2 jan-mar 1,3,5-7", "0 0 31 4 *"} {
		f.Add(s, int64(1795000000))
	}
	f.Fuzz(func(t *testing.T, expr string, unix int64) {
		c, err := parseCron(expr)
		if err != nil {
			return
		}
		from := time.Unix(unix%(1<<34), 0)
		n := c.next(from)
		if n.IsZero() {
			return
		}
		if !n.After(from) {
			t.Fatalf("%q: next(%v) = %v is not after it", expr, from, n)
		}
		if n2 := c.next(n); !n2.IsZero() && !n2.After(n) {
			t.Fatalf("%q: next(%v) = %v is not after it", expr, n, n2)
		}
	})
}

func BenchmarkCronNext(b *testing.B) {
	c, _ := parseCron("CRON_TZ=America/New_York */15 9-17 * * mon-fri")
	t0 := time.Date(2026, 11, 23, 10, 7, 0, 0, time.UTC)
	for b.Loop() {
		t0 = c.next(t0)
	}
}

// memLedger is the store's claim rule in memory: a minute is claimed once per job.
type memLedger struct {
	mu   sync.Mutex
	last map[string]time.Time
}

func (l *memLedger) claimCronFiring(_ context.Context, id string, minute time.Time) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if prev, ok := l.last[id]; ok && !minute.After(prev) {
		return false, nil
	}
	l.last[id] = minute
	return true, nil
}

// The scheduler on a fake clock (testing/synctest): it fires at each minute, skips while the previous run
// is going, never fires a minute the ledger has already seen (a restart within the minute), and does not
// replay the firings missed while it was stopped.
func TestCronScheduler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		ledger := &memLedger{last: map[string]time.Time{}}
		var mu sync.Mutex
		var fired, skipped []string
		running := make(chan struct{}) // the run of the first firing; closed when it ends
		fire := func(job cronJob, at time.Time) (<-chan struct{}, error) {
			mu.Lock()
			defer mu.Unlock()
			fired = append(fired, at.UTC().Format("15:04"))
			if len(fired) == 1 {
				return running, nil
			}
			done := make(chan struct{})
			close(done)
			return done, nil
		}
		skip := func(job cronJob, at time.Time) {
			mu.Lock()
			defer mu.Unlock()
			skipped = append(skipped, at.UTC().Format("15:04"))
		}
		seen := func() (string, string) {
			mu.Lock()
			defer mu.Unlock()
			return strings.Join(fired, ","), strings.Join(skipped, ",")
		}
		job := cronJob{ID: cronJobID("a", "CRON_TZ=UTC * * * * *", "p"), Agent: "a", Schedule: "CRON_TZ=UTC * * * * *", Prompt: "p"}
		// The bubble's clock starts at 2000-01-01 00:00:00 UTC.
		cs := newCronScheduler(time.Now, ledger, fire, skip, log)
		cs.setJobs([]cronJob{job})
		if e := cs.entries(); len(e) != 1 || e[0].NextAt != "2000-01-01T00:01:00.000Z" || e[0].JobID != job.ID {
			t.Fatalf("entries %+v", e)
		}
		time.Sleep(61 * time.Second)
		synctest.Wait()
		if f, s := seen(); f != "00:01" || s != "" {
			t.Fatalf("after 00:01: fired %q skipped %q", f, s)
		}
		time.Sleep(60 * time.Second) // 00:02: the first run is still going
		synctest.Wait()
		if f, s := seen(); f != "00:01" || s != "00:02" {
			t.Fatalf("after 00:02: fired %q skipped %q", f, s)
		}
		close(running)
		time.Sleep(60 * time.Second)
		synctest.Wait()
		if f, _ := seen(); f != "00:01,00:03" {
			t.Fatalf("after 00:03: fired %q", f)
		}
		cs.Close()

		// A previous process fired 00:04 (the ledger has it); a new scheduler started within that minute
		// must not fire it again.
		ledger.claimCronFiring(context.Background(), job.ID, time.Date(2000, 1, 1, 0, 4, 0, 0, time.UTC))
		cs = newCronScheduler(func() time.Time { return time.Now().Add(-time.Second) }, ledger, fire, skip, log) // a clock a second behind
		cs.setJobs([]cronJob{job})
		time.Sleep(60 * time.Second) // 00:04:01
		synctest.Wait()
		if f, _ := seen(); f != "00:01,00:03" {
			t.Fatalf("fired a minute the ledger had: %q", f)
		}
		cs.Close()

		// Down for ten minutes: nothing is replayed, the next firing is the next minute.
		time.Sleep(10 * time.Minute) // 00:14:01
		cs = newCronScheduler(time.Now, ledger, fire, skip, log)
		cs.setJobs([]cronJob{job})
		time.Sleep(60 * time.Second)
		synctest.Wait()
		if f, _ := seen(); f != "00:01,00:03,00:15" {
			t.Fatalf("after the downtime: %q", f)
		}
		// Replacing the job set takes effect: no jobs, no firings.
		cs.setJobs(nil)
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		if f, _ := seen(); f != "00:01,00:03,00:15" || len(cs.entries()) != 0 {
			t.Fatalf("after removing the job: %q", f)
		}
		cs.Close()
	})
}

// A step far past the field's range (or past int) selects the first value and returns at once.
func TestCronHugeStep(t *testing.T) {
	c, err := parseCron("5/9223372036854775807 */99999999999 * * *")
	if err != nil || c.minute != 1<<5 || c.hour != 1 {
		t.Fatalf("%v %b %b", err, c.minute, c.hour)
	}
}
