// triggers_cron.go — our own cron: the expression parser, next firing, and the one scheduler goroutine.
//
// Entry points: parseCron(expr) → cronSchedule, cronSchedule.next(t), cronJobID, newCronScheduler (owned
// by the trigger service; setJobs on every trigger sync, entries for GET /v1/triggers, Close).
//
// Rules (DESIGN §7, issue 10): five fields (minute hour day-of-month month day-of-week) with lists,
// ranges, steps and names (jan..dec, sun..sat), 0 and 7 both Sunday; @yearly @annually @monthly @weekly
// @daily @midnight @hourly; when day-of-month and day-of-week are both restricted (neither starts with
// `*`) a day matching either fires, as in Vixie cron. Host local time unless the expression starts with
// `CRON_TZ=<Zone> `. Wall-clock semantics across DST: a wall time skipped by a spring-forward fires once,
// right after the gap; a wall time repeated by a fall-back fires once, at its first occurrence. Missed
// firings while the server was down are not replayed; the ledger (the store) makes a job fire at most
// once per minute, also across a restart; a firing while the job's previous run is still going is
// skipped (reported through the skipped callback).
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// cronSchedule is a parsed expression: one bit per allowed value of each field.
type cronSchedule struct {
	minute, hour, dom, month, dow uint64
	domStar, dowStar              bool // the field started with `*` (Vixie's rule for dom/dow)
	loc                           *time.Location
}

type cronField struct {
	name     string
	min, max int
	names    []string // index + min is the value
}

var cronFields = [5]cronField{
	{"minute", 0, 59, nil},
	{"hour", 0, 23, nil},
	{"day-of-month", 1, 31, nil},
	{"month", 1, 12, []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}},
	{"day-of-week", 0, 7, []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}},
}

var cronMacros = map[string]string{
	"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
	"@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}

// parseCron parses an expression; its error names the field and the value at fault.
func parseCron(expr string) (cronSchedule, error) {
	var c cronSchedule
	c.loc = time.Local
	s := strings.TrimSpace(expr)
	if rest, ok := strings.CutPrefix(s, "CRON_TZ="); ok {
		zone, tail, _ := strings.Cut(rest, " ")
		loc, err := time.LoadLocation(zone)
		if err != nil || zone == "" {
			return c, fmt.Errorf("CRON_TZ=%q is not a known time zone", zone)
		}
		c.loc, s = loc, strings.TrimSpace(tail)
	}
	if strings.HasPrefix(s, "@") {
		m, ok := cronMacros[strings.ToLower(s)]
		if !ok {
			return c, fmt.Errorf("%q is not a supported macro: use @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly", s)
		}
		s = m
	}
	fields := strings.Fields(s)
	if len(fields) != 5 {
		return c, fmt.Errorf("expected 5 fields (minute hour day-of-month month day-of-week), found %d", len(fields))
	}
	sets := [5]*uint64{&c.minute, &c.hour, &c.dom, &c.month, &c.dow}
	for i, f := range fields {
		set, err := parseCronField(f, cronFields[i])
		if err != nil {
			return c, err
		}
		*sets[i] = set
	}
	if c.dow&(1<<7) != 0 { // 7 is Sunday too
		c.dow = c.dow&^(1<<7) | 1
	}
	c.domStar, c.dowStar = strings.HasPrefix(fields[2], "*"), strings.HasPrefix(fields[4], "*")
	return c, nil
}

func parseCronField(s string, f cronField) (uint64, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%s field %q: %s", f.name, s, fmt.Sprintf(format, a...))
	}
	var set uint64
	for _, item := range strings.Split(s, ",") {
		if item == "" {
			return 0, bad("empty list item")
		}
		rng, stepText, hasStep := strings.Cut(item, "/")
		lo, hi, step := f.min, f.max, 1
		if hasStep {
			n, err := strconv.Atoi(stepText)
			if err != nil || n <= 0 {
				return 0, bad("step %q must be a positive number", stepText)
			}
			step = min(n, f.max+1) // a step past the range is just its first value (and cannot overflow)
		}
		if f.name == "day-of-week" && rng == "*" {
			hi = 6 // `*` is every day once, not Sunday twice
		}
		if rng != "*" {
			a, b, isRange := strings.Cut(rng, "-")
			var err error
			if lo, err = cronValue(a, f); err != nil {
				return 0, bad("%v", err)
			}
			switch {
			case isRange:
				if hi, err = cronValue(b, f); err != nil {
					return 0, bad("%v", err)
				}
				if hi < lo {
					return 0, bad("range %d-%d runs backwards", lo, hi)
				}
			case hasStep:
				hi = f.max // `5/10` is from 5 to the end, every 10
			default:
				hi = lo
			}
		}
		for v := lo; v <= hi; v += step {
			set |= 1 << uint(v)
		}
	}
	return set, nil
}

func cronValue(s string, f cronField) (int, error) {
	if i := slices.Index(f.names, strings.ToLower(s)); i >= 0 {
		return i + f.min, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		if f.names != nil {
			return 0, fmt.Errorf("%q is not a number or a name (%s..%s)", s, f.names[0], f.names[len(f.names)-1])
		}
		return 0, fmt.Errorf("%q is not a number", s)
	}
	if n < f.min || n > f.max {
		return 0, fmt.Errorf("value %d is out of range %d-%d", n, f.min, f.max)
	}
	return n, nil
}

func (c cronSchedule) dayMatches(d time.Time) bool {
	dom, dow := c.dom&(1<<uint(d.Day())) != 0, c.dow&(1<<uint(d.Weekday())) != 0
	if c.domStar || c.dowStar {
		return dom && dow
	}
	return dom || dow
}

// cronHorizon bounds the search: an expression with no firing in 5 years (`0 0 30 2 *`) has none.
const cronHorizon = 5 * 366

// next is the first firing strictly after t, or the zero time when there is none within 5 years. It walks
// the calendar by days and only looks at the allowed hours and minutes of a matching day.
func (c cronSchedule) next(t time.Time) time.Time {
	loc := c.loc
	if loc == nil {
		loc = time.Local
	}
	after := t.In(loc)
	y, mo, d := after.Date()
	startH, startM := after.Hour(), after.Minute()
	for day := 0; day <= cronHorizon; day++ {
		date := time.Date(y, mo, d+day, 12, 0, 0, 0, loc) // noon: never inside a DST gap
		if c.month&(1<<uint(date.Month())) == 0 || !c.dayMatches(date) {
			continue
		}
		for h := range 24 {
			if c.hour&(1<<uint(h)) == 0 || (day == 0 && h < startH) {
				continue
			}
			for m := range 60 {
				if c.minute&(1<<uint(m)) == 0 || (day == 0 && h == startH && m < startM) {
					continue
				}
				if at, ok := wallInstant(date, h, m, loc, t); ok {
					return at
				}
			}
		}
	}
	return time.Time{}
}

// wallInstant is the instant at which the wall clock in loc first reads date h:m, and whether it is
// strictly after `after`. A wall time repeated by a fall-back counts once, at its first occurrence; a wall
// time skipped by a spring-forward maps to the end of the gap (Vixie cron runs it right after).
func wallInstant(date time.Time, h, m int, loc *time.Location, after time.Time) (time.Time, bool) {
	y, mo, d := date.Date()
	naive := time.Date(y, mo, d, h, m, 0, 0, time.UTC)
	_, off0 := time.Date(y, mo, d, h, m, 0, 0, loc).Zone()
	approx := naive.Add(-time.Duration(off0) * time.Second)
	var first time.Time
	offBefore := 0
	for i, probe := range [...]time.Duration{-3 * time.Hour, 3 * time.Hour} {
		_, off := approx.Add(probe).In(loc).Zone() // the offsets in force on either side of this wall time
		if i == 0 {
			offBefore = off
		}
		u := naive.Add(-time.Duration(off) * time.Second)
		if lt := u.In(loc); lt.Day() == d && lt.Hour() == h && lt.Minute() == m && (first.IsZero() || u.Before(first)) {
			first = u
		}
	}
	if first.IsZero() { // inside a gap: the old offset lands past it; the new zone starts where the gap ends
		first, _ = naive.Add(-time.Duration(offBefore) * time.Second).In(loc).ZoneBounds()
	}
	return first, first.After(after)
}

// cronJobID is stable across restarts, so the ledger remembers a job's last firing.
func cronJobID(agent, schedule, prompt string) string {
	sum := sha256.Sum256([]byte(agent + "\x00" + schedule + "\x00" + prompt))
	return "cron_" + hex.EncodeToString(sum[:6])
}

type cronJob struct{ ID, Agent, Schedule, Prompt string }

// cronEntry is one row of the `cron` list of GET /v1/triggers.
type cronEntry struct {
	JobID    string `json:"jobId"`
	Agent    string `json:"agent"`
	Schedule string `json:"schedule"` // the spec string verbatim, CRON_TZ= included
	Prompt   string `json:"prompt"`
	NextAt   string `json:"nextAt"` // RFC 3339 UTC, strictly after now
}

// cronLedger makes a firing happen at most once per job and minute, also across restarts.
type cronLedger interface {
	claimCronFiring(ctx context.Context, jobID string, minute time.Time) (bool, error)
}

type cronState struct {
	job     cronJob
	sched   cronSchedule
	next    time.Time
	running <-chan struct{} // the run of the last firing; a due firing is skipped while it is open
}

// cronScheduler is the one goroutine that fires cron jobs. It sleeps until the earliest next firing.
type cronScheduler struct {
	now     func() time.Time
	ledger  cronLedger
	fire    func(job cronJob, at time.Time) (<-chan struct{}, error)
	skipped func(job cronJob, at time.Time)
	log     *slog.Logger

	mu     sync.Mutex
	jobs   map[string]*cronState
	wake   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

func newCronScheduler(now func() time.Time, ledger cronLedger,
	fire func(job cronJob, at time.Time) (<-chan struct{}, error),
	skipped func(job cronJob, at time.Time), log *slog.Logger) *cronScheduler {
	ctx, cancel := context.WithCancel(context.Background())
	cs := &cronScheduler{now: now, ledger: ledger, fire: fire, skipped: skipped, log: log,
		jobs: map[string]*cronState{}, wake: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	go cs.loop(ctx)
	return cs
}

// setJobs replaces the job set. A job that stays keeps its next firing and its running run; a new one
// starts from now, so nothing missed is replayed.
func (cs *cronScheduler) setJobs(jobs []cronJob) {
	now := cs.now()
	cs.mu.Lock()
	next := map[string]*cronState{}
	for _, j := range jobs {
		if st, ok := cs.jobs[j.ID]; ok {
			next[j.ID] = st
			continue
		}
		sched, err := parseCron(j.Schedule)
		if err != nil { // validation keeps these out; a stored spec from an older agentd is skipped
			cs.log.Warn("cron schedule skipped", "agent", j.Agent, "schedule", j.Schedule, "err", err)
			continue
		}
		next[j.ID] = &cronState{job: j, sched: sched, next: sched.next(now)}
	}
	cs.jobs = next
	cs.mu.Unlock()
	select {
	case cs.wake <- struct{}{}:
	default:
	}
}

// entries lists the jobs by next firing.
func (cs *cronScheduler) entries() []cronEntry {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	out := make([]cronEntry, 0, len(cs.jobs))
	for _, st := range cs.jobs {
		e := cronEntry{JobID: st.job.ID, Agent: st.job.Agent, Schedule: st.job.Schedule, Prompt: st.job.Prompt}
		if !st.next.IsZero() {
			e.NextAt = timestamp(st.next)
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b cronEntry) int {
		return strings.Compare(a.NextAt+a.JobID, b.NextAt+b.JobID)
	})
	return out
}

func (cs *cronScheduler) loop(ctx context.Context) {
	defer close(cs.done)
	for {
		var timer *time.Timer
		var wait <-chan time.Time
		if earliest := cs.earliest(); !earliest.IsZero() {
			timer = time.NewTimer(max(earliest.Sub(cs.now()), 0))
			wait = timer.C
		}
		fire := false
		select {
		case <-ctx.Done():
			return
		case <-cs.wake:
		case <-wait:
			fire = true
		}
		if timer != nil {
			timer.Stop()
		}
		if fire {
			cs.fireDue(ctx)
		}
	}
}

func (cs *cronScheduler) earliest() time.Time {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var e time.Time
	for _, st := range cs.jobs {
		if !st.next.IsZero() && (e.IsZero() || st.next.Before(e)) {
			e = st.next
		}
	}
	return e
}

// fireDue fires every job whose time has come, then moves it to its next firing after now.
func (cs *cronScheduler) fireDue(ctx context.Context) {
	now := cs.now()
	cs.mu.Lock()
	var due []*cronState
	var ats []time.Time
	for _, st := range cs.jobs {
		if !st.next.IsZero() && !st.next.After(now) {
			due = append(due, st)
			ats = append(ats, st.next)
			st.next = st.sched.next(now)
		}
	}
	cs.mu.Unlock()
	for i, st := range due {
		cs.fireOne(ctx, st, ats[i])
	}
}

func (cs *cronScheduler) fireOne(ctx context.Context, st *cronState, at time.Time) {
	claimed, err := cs.ledger.claimCronFiring(ctx, st.job.ID, at.Truncate(time.Minute))
	if err != nil {
		cs.log.Error("cron ledger", "job", st.job.ID, "err", err)
		return
	}
	if !claimed { // this minute already fired (a restart within the minute)
		return
	}
	cs.mu.Lock()
	running := st.running
	cs.mu.Unlock()
	if running != nil {
		select {
		case <-running:
		default:
			cs.skipped(st.job, at)
			return
		}
	}
	done, err := cs.fire(st.job, at)
	if err != nil {
		cs.log.Warn("cron firing failed", "job", st.job.ID, "agent", st.job.Agent, "err", err)
		return
	}
	cs.mu.Lock()
	st.running = done
	cs.mu.Unlock()
}

// Close stops the scheduler goroutine and waits for it. Runs it started belong to the run service.
func (cs *cronScheduler) Close() {
	cs.cancel()
	<-cs.done
}
