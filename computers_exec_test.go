package main

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
)

// recordingSink collects what an outputBatcher sends; block, when set, holds every send until closed.
type recordingSink struct {
	mu     sync.Mutex
	frames []outputChunk
	block  chan struct{}
	err    error
}

func (r *recordingSink) send(stream string, data []byte) error {
	if r.block != nil {
		<-r.block
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.frames = append(r.frames, outputChunk{stream: stream, data: append([]byte(nil), data...)})
	return r.err
}

func (r *recordingSink) snapshot() []outputChunk {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]outputChunk(nil), r.frames...)
}

func TestOutputBatcherKeepsOrderAndMerges(t *testing.T) {
	rec := &recordingSink{block: make(chan struct{})}
	b := newOutputBatcher(rec.send)
	b.add("stdout", "a") // the sender takes it and then waits on block
	eventually(t, "the sender to take the first chunk", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.queue) == 0
	})
	for _, c := range []outputChunk{{"stdout", []byte("b")}, {"stdout", []byte("c")}, {"stderr", []byte("E")}, {"stdout", []byte("d")}} {
		b.add(c.stream, string(c.data))
	}
	close(rec.block)
	b.close()
	var got []string
	for _, f := range rec.snapshot() {
		got = append(got, f.stream+":"+string(f.data))
	}
	if want := "stdout:a stdout:bc stderr:E stdout:d"; strings.Join(got, " ") != want {
		t.Fatalf("frames %q, want %q", got, want)
	}
}

func TestOutputBatcherSendsATrickleWithoutClose(t *testing.T) {
	rec := &recordingSink{}
	b := newOutputBatcher(rec.send)
	defer b.close()
	b.add("stdout", "ready\n") // a live command's first line must reach the consumer while it runs
	eventually(t, "the lone chunk to be sent", func() bool { return len(rec.snapshot()) == 1 })
}

func TestOutputBatcherBoundsWhatWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recordingSink{block: make(chan struct{})}
		b := newOutputBatcher(rec.send)
		b.maxPending = 10
		b.add("stdout", "0123456789") // taken by the sender, which then blocks on rec.block
		synctest.Wait()
		b.add("stdout", "0123456789") // fills pending
		added := make(chan struct{})
		go func() { b.add("stdout", "x"); close(added) }()
		synctest.Wait() // every goroutine is blocked: the sender on rec.block, this add (if it waits)
		select {
		case <-added:
			t.Fatal("add did not wait while maxPending bytes were queued")
		default:
		}
		close(rec.block)
		<-added
		b.close()
		var total int
		for _, f := range rec.snapshot() {
			total += len(f.data)
		}
		if total != 21 {
			t.Fatalf("sent %d bytes, want 21", total)
		}
	})
}

func TestOutputBatcherConsumerGoneNeverBlocks(t *testing.T) {
	rec := &recordingSink{err: errors.New("consumer gone")}
	b := newOutputBatcher(rec.send)
	b.maxPending = 4
	for i := 0; i < 1000; i++ { // would wait forever on a dead consumer if failures did not release add
		b.add("stdout", "0123456789")
	}
	b.close()
	if n := len(rec.snapshot()); n == 0 || n > 1000 {
		t.Fatalf("%d sends", n)
	}
}
