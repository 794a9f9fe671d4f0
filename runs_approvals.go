// runs_approvals.go — human approval of dangerous tool calls in `ask` mode: the pending book, the 120 s
// expiry, `remember`, and the GET/POST /v1/approvals endpoints.
//
// Entry points: approvalBook.request (called by the loop; blocks until approved, denied, expired or the
// run's context ends), approvalBook.answer (the POST endpoint), approvalBook.list.
// Rules (docs/API.md Approvals, DESIGN §6): approval_required reaches the run stream before the call blocks;
// no answer within 120 s → denied and the approval is gone (E_APPROVAL_NOT_FOUND); an answered approval
// is gone too, so answering twice is a 404; `remember` (only with approve) auto-approves that tool for that
// agent until restart; cancel and run end deny pending approvals; any doubt denies (fail closed).
package main

import (
	"context"
	"net/http"
	"sort"
	"sync"
	"time"
)

const approvalWait = 120 * time.Second

// PendingApproval is one blocked tool call waiting for a human.
type PendingApproval struct {
	ApprovalID string          `json:"approvalId"`
	RunID      string          `json:"runId"`
	Agent      string          `json:"agent"`
	Call       ToolCall        `json:"call"`
	Request    approvalRequest `json:"request"`
	CreatedAt  string          `json:"createdAt"`
	ExpiresAt  string          `json:"expiresAt"`
}

// approvalRequest is the `request` object of an approval_required run event.
type approvalRequest struct {
	RunID     string         `json:"runId"`
	Agent     string         `json:"agent"`
	Tool      string         `json:"tool"`
	CallID    string         `json:"callId"`
	Args      map[string]any `json:"args"`
	Prompt    string         `json:"prompt"`
	Dangerous bool           `json:"dangerous"`
}

type approvalAnswer struct {
	approved   bool
	remembered bool
}

type pendingEntry struct {
	p      PendingApproval
	answer chan approvalAnswer // buffered 1; written once by whoever removes the entry
}

// approvalTimer starts a timer; tests inject one they fire by hand instead of waiting 120 s.
type approvalTimer func(d time.Duration) (c <-chan time.Time, stop func())

func realApprovalTimer(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}

type approvalBook struct {
	now   func() time.Time
	timer approvalTimer
	hub   *hub

	mu         sync.Mutex
	pending    map[string]*pendingEntry
	remembered map[string]bool // agent + "\x00" + tool
}

func newApprovalBook(now func() time.Time, h *hub) *approvalBook {
	return &approvalBook{now: now, timer: realApprovalTimer, hub: h,
		pending: map[string]*pendingEntry{}, remembered: map[string]bool{}}
}

// request blocks a dangerous call until a human answers. raised is called (with the pending approval)
// before blocking, so the run stream carries approval_required at once. The result says whether the
// call may run and, when not, why.
func (b *approvalBook) request(ctx context.Context, runID, agent string, call ToolCall, shownArgs map[string]any,
	raised func(PendingApproval)) (approved bool, reason string) {
	if ctx.Err() != nil {
		// Raised after cancel (or timeout, shutdown): nobody may approve a call of a run that is over.
		return false, "the run ended before the call could be approved"
	}
	b.mu.Lock()
	if b.remembered[agent+"\x00"+call.Name] {
		b.mu.Unlock()
		return true, "remembered"
	}
	now := b.now()
	e := &pendingEntry{answer: make(chan approvalAnswer, 1)}
	e.p = PendingApproval{
		ApprovalID: newID("apr"), RunID: runID, Agent: agent,
		Call:      ToolCall{Type: "tool_call", ID: call.ID, Name: call.Name, Args: shownArgs},
		CreatedAt: timestamp(now), ExpiresAt: timestamp(now.Add(approvalWait)),
	}
	e.p.Request = approvalRequest{RunID: runID, Agent: agent, Tool: call.Name, CallID: call.ID, Args: shownArgs,
		Prompt: "Allow " + agent + " to run " + call.Name + "?", Dangerous: isDangerous(call.Name)}
	b.pending[e.p.ApprovalID] = e
	b.mu.Unlock()

	expired, stop := b.timer(approvalWait) // started before anyone can see the approval
	defer stop()
	if raised != nil {
		raised(e.p)
	}
	if b.hub != nil {
		b.hub.publish("runs", "approval_required", e.p)
	}
	select {
	case a := <-e.answer:
		return settled(ctx, a)
	case <-expired:
		if b.remove(e.p.ApprovalID) {
			b.published(e.p, false, false, "expired")
			return false, "no answer within 120 s"
		}
	case <-ctx.Done():
		if b.remove(e.p.ApprovalID) {
			b.published(e.p, false, false, "run ended")
			return false, "the run ended while waiting for approval"
		}
	}
	// Someone removed the entry first and wrote its answer.
	return settled(ctx, <-e.answer)
}

// settled turns a human's answer into the verdict. An approval that raced the run's end is denied: the
// run is over (cancelled, timed out, shutting down), so the call must not run (fail closed).
func settled(ctx context.Context, a approvalAnswer) (bool, string) {
	if ctx.Err() != nil {
		return false, "the run ended while waiting for approval"
	}
	if a.approved {
		return true, "approved"
	}
	return false, "denied by a human"
}

// remove takes an entry out of the book; false when it was already gone.
func (b *approvalBook) remove(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.pending[id]
	delete(b.pending, id)
	return ok
}

func (b *approvalBook) published(p PendingApproval, approved, remembered bool, how string) {
	if b.hub != nil {
		b.hub.publish("runs", "approval_answered", map[string]any{
			"approvalId": p.ApprovalID, "runId": p.RunID, "agent": p.Agent, "tool": p.Call.Name,
			"approved": approved, "remembered": remembered, "by": how,
		})
	}
}

// answer settles a pending approval. remember counts only with approve.
func (b *approvalBook) answer(id string, approve, remember bool) (approvalAnswer, error) {
	b.mu.Lock()
	e, ok := b.pending[id]
	if ok && b.now().After(parseTimestamp(e.p.ExpiresAt)) {
		ok = false // expired but its timer has not fired yet: it no longer exists
	}
	if !ok {
		b.mu.Unlock()
		return approvalAnswer{}, errorf(codeApprovalNotFound, "approval %q not found", id).
			withHint("approvals expire 120 seconds after being raised and disappear once answered; list them with GET /v1/approvals")
	}
	delete(b.pending, id)
	a := approvalAnswer{approved: approve, remembered: approve && remember}
	if a.remembered {
		b.remembered[e.p.Agent+"\x00"+e.p.Call.Name] = true
	}
	b.mu.Unlock()
	e.answer <- a
	b.published(e.p, a.approved, a.remembered, "human")
	return a, nil
}

// list returns the pending approvals, oldest first, leaving out expired ones.
func (b *approvalBook) list() []PendingApproval {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	out := make([]PendingApproval, 0, len(b.pending))
	for _, e := range b.pending {
		if now.After(parseTimestamp(e.p.ExpiresAt)) {
			continue
		}
		out = append(out, e.p)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].CreatedAt != out[j].CreatedAt {
			return out[i].CreatedAt < out[j].CreatedAt
		}
		return out[i].ApprovalID < out[j].ApprovalID
	})
	return out
}

func parseTimestamp(s string) time.Time {
	t, err := time.Parse("2006-01-02T15:04:05.000Z", s)
	if err != nil {
		return time.Time{}
	}
	return t
}

func (s *server) handleListApprovals(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, map[string]any{"approvals": s.runs.approvals.list()})
	return nil
}

func (s *server) handleAnswerApproval(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Approve  *bool `json:"approve"`
		Remember bool  `json:"remember"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	if body.Approve == nil {
		return errorf(codeSpecInvalid, "approve: Required").withHint(`send {"approve": true} or {"approve": false}`)
	}
	id := r.PathValue("id")
	a, err := s.runs.approvals.answer(id, *body.Approve, body.Remember)
	return reply(w, http.StatusOK, map[string]any{"approvalId": id, "approved": a.approved, "remembered": a.remembered}, err)
}
