package runner

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// failingRank is a cpu rank that counts the calls that reach it and, when
// failAt > 0, fails its failAt-th all-reduce before taking part in it.
type failingRank struct {
	*cpuRank
	failAt     int
	allReduces int
	syncs      atomic.Int32 // read by the test between calls
	closes     atomic.Int32
	aborts     atomic.Int32
	closeErr   error // what Close returns after closing
}

var errInjected = errors.New("injected fault")

func (r *failingRank) AllReduceSum(buf Buffer, n int) error {
	if r.allReduces++; r.allReduces == r.failAt {
		return errInjected
	}
	return r.cpuRank.AllReduceSum(buf, n)
}

func (r *failingRank) Sync() error {
	r.syncs.Add(1)
	return r.cpuRank.Sync()
}

func (r *failingRank) Close() error {
	r.closes.Add(1)
	if err := r.cpuRank.Close(); err != nil {
		return err
	}
	return r.closeErr
}

func (r *failingRank) AbortCollectives() error {
	r.aborts.Add(1)
	return r.cpuRank.AbortCollectives()
}

// newFailingGroup is a group of size cpu ranks, all here, on in-memory
// collectives, each set up by configure, begun on one 4-token prompt.
func newFailingGroup(t *testing.T, cfg Config, size int, configure func(*failingRank)) (*Group, []*failingRank) {
	t.Helper()
	comm := newCPUComm(size)
	ranks := make([]*failingRank, size)
	here := make([]int, size)
	for i := range here {
		here[i] = i
	}
	g, err := NewGroup(cfg, size, here, RankBackends{
		Open: func(rank int) (Backend, error) {
			ranks[rank] = &failingRank{cpuRank: &cpuRank{CPU: NewCPU(), comm: comm, rank: rank}}
			configure(ranks[rank])
			return ranks[rank], nil
		},
		Join: func(int, Backend) error { return nil },
	}, WeightSource{Seed: 7}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Begin(1, 4, 2, []int32{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	return g, ranks
}

// A rank that fails in the middle of a prefill, while the others wait for
// it in an all-reduce, ends the call at once: the Group aborts the
// collectives, reports the failed rank first and the others as its
// consequences, and is dead from then on; Close still closes every rank.
// (Before aborts, the Group waited for rank 0 forever: a hang, which the
// go test timeout reports.)
func TestGroupRankFailureAbortsTheOthers(t *testing.T) {
	cfg, err := Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	g, ranks := newFailingGroup(t, cfg, 4, func(r *failingRank) {
		if r.rank == 1 {
			r.failAt = 3 // layer 1's attention all-reduce of the prefill
		}
	})
	err = g.Prefill()
	if err == nil {
		t.Fatal("prefill with a failing rank succeeded")
	}
	lines := strings.Split(err.Error(), "\n")
	const where = "prefill: layer 1 attn_all_reduce: "
	want := []string{
		"rank 1: " + where + errInjected.Error(),
		"rank 0: aborted after rank 1 failed: " + where + errCollectivesAborted.Error(),
		"rank 2: aborted after rank 1 failed: " + where + errCollectivesAborted.Error(),
		"rank 3: aborted after rank 1 failed: " + where + errCollectivesAborted.Error(),
	}
	if len(lines) != len(want) {
		t.Fatalf("error %q; want the lines %q", err, want)
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("error line %d: %q, want %q", i, lines[i], want[i])
		}
	}
	if !errors.Is(err, errInjected) {
		t.Errorf("%v does not wrap the injected fault", err)
	}
	checkDeadGroup(t, g, err, ranks)
}

// checkDeadGroup: every call of a dead group returns its failure without
// reaching a rank; Close closes every rank.
func checkDeadGroup(t *testing.T, g *Group, failure error, ranks []*failingRank) {
	t.Helper()
	syncs := make([]int32, len(ranks))
	for i, r := range ranks {
		syncs[i] = r.syncs.Load()
	}
	calls := map[string]func() error{
		"Sync":   g.Sync,
		"Decode": g.Decode,
		"NextTokens": func() error {
			_, err := g.NextTokens()
			return err
		},
		"NewEvent": func() error {
			_, err := g.NewEvent()
			return err
		},
	}
	for name, call := range calls {
		if err := call(); err != failure {
			t.Errorf("%s on a dead group: %v, want the failure %v", name, err, failure)
		}
	}
	if err := g.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	for rank, r := range ranks {
		if n := r.syncs.Load() - syncs[rank]; n != 0 {
			t.Errorf("rank %d: synchronised %d times after the failure", rank, n)
		}
		if n := r.closes.Load(); n != 1 {
			t.Errorf("rank %d: closed %d times, want 1", rank, n)
		}
	}
}

// Ranks 0 and 1 of 4 run here; ranks 2 and 3 "run in another process"
// that went away, which the ranks here learn only by asking their
// collectives (CollectivesWatcher). The Group asks while it waits, aborts,
// and the prefill ends with that failure first. (Without the watch the
// ranks here wait for 2 and 3 forever: a hang, which the go test timeout
// reports.)
func TestGroupWatchesCollectivesFailingElsewhere(t *testing.T) {
	cfg, err := Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	comm := newCPUComm(4)
	g, err := NewGroup(cfg, 4, []int{0, 1}, RankBackends{
		Open: func(rank int) (Backend, error) { return &cpuRank{CPU: NewCPU(), comm: comm, rank: rank}, nil },
		Join: func(int, Backend) error { return nil },
	}, WeightSource{Seed: 7}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	g.watchEvery = time.Millisecond
	if err := g.Begin(1, 4, 2, []int32{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	gone := errors.New("ranks 2 and 3 went away")
	comm.mu.Lock()
	comm.remote = gone
	comm.mu.Unlock()
	err = g.Prefill()
	const where = "prefill: layer 0 attn_all_reduce: "
	want := []string{
		"rank 0: its collectives failed while it waited: " + gone.Error(),
		"rank 0: aborted: " + where + errCollectivesAborted.Error(),
		"rank 1: aborted after rank 0 failed: " + where + errCollectivesAborted.Error(),
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Errorf("prefill while ranks elsewhere went away: %v\nwant:\n%s", err, strings.Join(want, "\n"))
	}
}

// A rank that fails to close a live group fails Close with its error alone:
// nothing is aborted (the other ranks' shutdown goes on), every rank is
// closed once, and the closed group's calls fail instead of reaching ranks
// that are gone.
func TestGroupCloseFailureAbortsNothing(t *testing.T) {
	cfg, err := Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	closeFailed := errors.New("close failed")
	g, ranks := newFailingGroup(t, cfg, 2, func(r *failingRank) {
		if r.rank == 1 {
			r.closeErr = closeFailed
		}
	})
	if err := g.Prefill(); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err == nil || err.Error() != "rank 1: "+closeFailed.Error() {
		t.Errorf("close: %v, want %q", err, "rank 1: "+closeFailed.Error())
	}
	for rank, r := range ranks {
		if n := r.aborts.Load(); n != 0 {
			t.Errorf("rank %d: collectives aborted %d times by Close", rank, n)
		}
		if n := r.closes.Load(); n != 1 {
			t.Errorf("rank %d: closed %d times, want 1", rank, n)
		}
	}
	if _, err := g.NextTokens(); !errors.Is(err, errGroupClosed) {
		t.Errorf("NextTokens after Close: %v, want %v", err, errGroupClosed)
	}
	if err := g.Sync(); !errors.Is(err, errGroupClosed) {
		t.Errorf("Sync after Close: %v, want %v", err, errGroupClosed)
	}
	if err := g.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}
