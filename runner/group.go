package runner

import (
	"cmp"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Group runs a tensor-parallel model: one Engine per rank, each on its own
// goroutine locked to an OS thread (a GPU backend's calls must all come from
// the thread its context is current on), driven in lockstep. It is a
// bench.Target: Begin, Prefill and Decode enqueue on every rank at once;
// Sync waits for every rank's stream, so a timed region starts and ends
// with all of them synchronised; an event is one per rank, and the device
// time of a region is its slowest rank's (RankElapsed gives each).
//
// A Group may hold only some ranks of the communicator (the others run in
// other processes, on other nodes): it drives its own, and the collectives
// keep every process in step.
//
// A rank that fails never leaves the others waiting: on the first failure
// the Group aborts the collectives of every rank it holds (Aborter), so
// that ranks waiting in a collective for the failed one fail too, and
// returns the failure, named by rank, before its consequences. While it
// waits it also polls the ranks' collectives for a failure outside any
// call (CollectivesWatcher: a rank in another process went away) and
// treats one as the rank's. The Group is then dead: every later call
// returns that error at once; Close still releases everything.
type Group struct {
	cfg     Config
	size    int
	ranks   []*groupRank
	results chan rankResult // every rank's result of the call in progress
	dead    error           // the failure that aborted the ranks' collectives
	// watchEvery is how often the ranks' CollectivesWatcher are polled
	// during a call (the constant; tests shorten it).
	watchEvery time.Duration
}

type groupRank struct {
	rank   int // the rank in the communicator
	work   chan func()
	be     Backend
	e      *Engine
	shared atomic.Value // be, for other goroutines (abort, watch): set once it is open
}

// rankResult is one rank's result of a call; afterAbort says whether the
// rank returned after the call had begun aborting the collectives.
type rankResult struct {
	r          *groupRank
	err        error
	afterAbort bool
}

// CollectivesWatcher is implemented by backends whose collectives can fail
// outside any call while the rank waits, as when a rank in another process
// went away: CollectivesError, called from any goroutine, returns that
// failure (nil while there is none). The Group polls it every watchEvery
// while it waits for its ranks, and treats a failure as the rank's (the
// cuda backend's is ncclCommGetAsyncError; an Aborter is then aborted).
type CollectivesWatcher interface {
	CollectivesError() error
}

// watchEvery is how often a Group polls its ranks' CollectivesWatcher.
const watchEvery = time.Second

// Aborter is implemented by backends whose collectives can be ended from
// any goroutine: after AbortCollectives, a collective waiting for a peer
// (or a stream synchronisation behind one) fails instead of waiting for a
// rank that will never come, and every later collective fails at once. The
// cuda backend's is ncclCommAbort; the other nodes' NCCL may report it to
// their ranks as an asynchronous error (see CollectivesWatcher).
type Aborter interface {
	AbortCollectives() error
}

// RankBackends opens the backends of a Group's ranks. Open and Join run on
// the rank's own goroutine (locked to its OS thread), all ranks at once:
// Open makes the rank's backend (its GPU's context); Join makes it a rank of
// the collectives (NCCL's ncclCommInitRank returns only when every rank has
// joined, so Join runs only once every Open succeeded).
type RankBackends struct {
	Open func(rank int) (Backend, error)
	Join func(rank int, be Backend) error
}

// NewGroup opens ranks (the communicator ranks this process drives, of
// size in all), joins them and loads each one's share of the weights (see
// TPLayout). progress, when set, sees the first rank's loading.
func NewGroup(cfg Config, size int, ranks []int, open RankBackends, src WeightSource, progress func(done, total int)) (*Group, error) {
	if err := cfg.CheckTP(size); err != nil {
		return nil, err
	}
	if len(ranks) == 0 {
		return nil, errors.New("tensor-parallel group: no ranks to run")
	}
	g := &Group{cfg: cfg, size: size, results: make(chan rankResult, len(ranks)), watchEvery: watchEvery}
	for _, r := range ranks {
		if r < 0 || r >= size || slices.ContainsFunc(g.ranks, func(o *groupRank) bool { return o.rank == r }) {
			g.stop()
			return nil, fmt.Errorf("tensor-parallel group: rank %d of %d (ranks %v)", r, size, ranks)
		}
		g.ranks = append(g.ranks, startRank(r))
	}
	steps := []func(r *groupRank) error{
		func(r *groupRank) (err error) {
			r.be, err = open.Open(r.rank)
			if r.be != nil {
				r.shared.Store(r.be)
			}
			return err
		},
		func(r *groupRank) error { return open.Join(r.rank, r.be) },
		func(r *groupRank) error {
			lay, err := cfg.TPLayout(r.rank, size)
			if err != nil {
				return err
			}
			var p func(done, total int)
			if r == g.ranks[0] {
				p = progress
			}
			r.e, err = NewEngineRank(cfg, lay, r.be, src, p)
			return err
		},
	}
	for _, step := range steps {
		if err := g.each(step); err != nil {
			return nil, errors.Join(err, g.Close())
		}
	}
	return g, nil
}

// startRank starts the rank's goroutine, locked to its OS thread for its
// whole life (the thread ends with it, taking its CUDA context binding).
func startRank(rank int) *groupRank {
	r := &groupRank{rank: rank, work: make(chan func())}
	go func() {
		runtime.LockOSThread()
		for f := range r.work {
			f()
		}
	}()
	return r
}

// recovered is f(r), a panic turned into the rank's error: on a rank's
// goroutine a panic would end the process with Go's exit code 2, which the
// CLI gives to bad usage, and without the other ranks' shutdown.
func recovered(f func(r *groupRank) error, r *groupRank) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("rank %d: internal error (a bug): panic: %v\n%s", r.rank, v, debug.Stack())
		}
	}()
	return f(r)
}

// each runs f for every rank on the rank's goroutine, all at once, and
// returns when all are done (see run). A dead group returns its failure at
// once.
func (g *Group) each(f func(r *groupRank) error) error {
	if g.dead != nil {
		return g.dead
	}
	return g.run(g.ranks, f, true)
}

// run runs f on ranks, all at once, and collects their results as they
// come. With supervise (every call of a live group) the first failure
// aborts every rank's collectives, so that ranks waiting for the failed one
// return too, and kills the group (see failure); so does an asynchronous
// error of a rank's collectives, which it polls while it waits (watch).
// Without (Close) each rank's failure is its own and nothing is aborted: a
// rank that fails to close must not abort the others' clean shutdown.
func (g *Group) run(ranks []*groupRank, f func(r *groupRank) error, supervise bool) error {
	var aborting atomic.Bool
	for _, r := range ranks {
		r.work <- func() {
			err := recovered(f, r)
			g.results <- rankResult{r: r, err: err, afterAbort: aborting.Load()}
		}
	}
	var failed []rankResult
	var abortErrs []error
	fail := func(res rankResult) {
		if len(failed) == 0 && supervise {
			aborting.Store(true)
			abortErrs = g.abortCollectives(res.r)
		}
		failed = append(failed, res)
	}
	got := 0
	take := func(res rankResult) {
		got++
		if res.err != nil {
			fail(res)
		}
	}
	poll := time.NewTicker(g.watchEvery)
	defer poll.Stop()
	for got < len(ranks) {
		select {
		case res := <-g.results:
			take(res)
		case <-poll.C:
			if len(failed) > 0 || !supervise {
				continue
			}
			select { // a rank's own failure already waiting comes before any asynchronous one
			case res := <-g.results:
				take(res)
				continue
			default:
			}
			if res, ok := g.watch(); ok {
				fail(res)
			}
		}
	}
	if len(failed) == 0 {
		return nil
	}
	if !supervise {
		slices.SortFunc(failed, func(a, b rankResult) int { return cmp.Compare(a.r.rank, b.r.rank) })
		errs := make([]error, len(failed))
		for i, res := range failed {
			errs[i] = fmt.Errorf("rank %d: %w", res.r.rank, res.err)
		}
		return errors.Join(errs...)
	}
	g.dead = errors.Join(append(failure(failed), abortErrs...)...)
	return g.dead
}

// watch asks every rank's backend that is a CollectivesWatcher whether its
// collectives failed outside any call; the first that did is a failure.
func (g *Group) watch() (rankResult, bool) {
	for _, r := range g.ranks {
		w, ok := r.shared.Load().(CollectivesWatcher)
		if !ok {
			continue
		}
		if err := w.CollectivesError(); err != nil {
			return rankResult{r: r, err: fmt.Errorf("its collectives failed while it waited: %w", err)}, true
		}
	}
	return rankResult{}, false
}

// failure orders the failed ranks' errors: the first to arrive (the one
// that aborted the collectives), then the others that failed before the
// abort, then those that failed after it, marked as its consequences; by
// rank within each.
func failure(failed []rankResult) []error {
	first := failed[0]
	rest := slices.Clone(failed[1:])
	slices.SortFunc(rest, func(a, b rankResult) int { return cmp.Compare(a.r.rank, b.r.rank) })
	errs := []error{fmt.Errorf("rank %d: %w", first.r.rank, first.err)}
	for _, res := range rest {
		if !res.afterAbort {
			errs = append(errs, fmt.Errorf("rank %d: %w", res.r.rank, res.err))
		}
	}
	for _, res := range rest {
		switch {
		case !res.afterAbort:
		case res.r == first.r: // first was its collectives' asynchronous error
			errs = append(errs, fmt.Errorf("rank %d: aborted: %w", res.r.rank, res.err))
		default:
			errs = append(errs, fmt.Errorf("rank %d: aborted after rank %d failed: %w", res.r.rank, first.r.rank, res.err))
		}
	}
	return errs
}

// abortCollectives aborts the failed rank's collectives, then every other
// rank's at once (so that the others' errors name the failed rank's abort;
// NCCL wants every rank of a node aborted, not only one: NVIDIA/nccl#863),
// each from a goroutine of its own: a rank's goroutine may be waiting in a
// collective. That goroutine keeps its OS thread to the end, so the thread
// exits with it and whatever device state the abort left current on it
// goes too.
func (g *Group) abortCollectives(failed *groupRank) []error {
	errs := make([]error, len(g.ranks))
	abort := func(i int, r *groupRank, wg *sync.WaitGroup) {
		a, ok := r.shared.Load().(Aborter)
		if !ok {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			if err := a.AbortCollectives(); err != nil {
				errs[i] = fmt.Errorf("rank %d: abort collectives: %w", r.rank, err)
			}
		}()
	}
	var first, rest sync.WaitGroup
	abort(g.index(failed), failed, &first)
	first.Wait()
	for i, r := range g.ranks {
		if r != failed {
			abort(i, r, &rest)
		}
	}
	rest.Wait()
	return slices.DeleteFunc(errs, func(err error) bool { return err == nil })
}

// AbortCollectives aborts every rank's collectives, from any goroutine:
// for a caller that gives up on a step that never returns (its ranks' peers,
// in this process or another, fail instead of waiting). The group is not
// usable after it.
func (g *Group) AbortCollectives() error {
	if len(g.ranks) == 0 {
		return nil
	}
	return errors.Join(g.abortCollectives(g.ranks[0])...)
}

// Do runs f with every rank's engine on the rank's goroutine, all at once.
func (g *Group) Do(f func(rank int, e *Engine) error) error {
	return g.each(func(r *groupRank) error { return f(r.rank, r.e) })
}

// DoBackend runs f with every rank's backend on the rank's goroutine.
func (g *Group) DoBackend(f func(rank int, be Backend) error) error {
	return g.each(func(r *groupRank) error { return f(r.rank, r.be) })
}

// Config is the model's configuration.
func (g *Group) Config() Config { return g.cfg }

// Size is the tensor-parallel size (ranks in all, here or elsewhere).
func (g *Group) Size() int { return g.size }

// Ranks are the communicator ranks this group drives.
func (g *Group) Ranks() []int {
	out := make([]int, len(g.ranks))
	for i, r := range g.ranks {
		out[i] = r.rank
	}
	return out
}

// BeginSeqs starts a fresh run of seqs on every rank (see Engine.BeginSeqs).
func (g *Group) BeginSeqs(seqs []SeqSpec, outputLen int, prompts []int32) error {
	return g.Do(func(_ int, e *Engine) error { return e.BeginSeqs(seqs, outputLen, prompts) })
}

// SetKVOptions lays every rank's cache out as o (see Engine.SetKVOptions).
func (g *Group) SetKVOptions(o KVOptions) error {
	return g.Do(func(_ int, e *Engine) error { return e.SetKVOptions(o) })
}

// Begin starts a fresh run on every rank (see Engine.Begin).
func (g *Group) Begin(batch, inputLen, outputLen int, prompts []int32) error {
	return g.Do(func(_ int, e *Engine) error { return e.Begin(batch, inputLen, outputLen, prompts) })
}

// Prefill enqueues the prefill on every rank.
func (g *Group) Prefill() error { return g.Do(func(_ int, e *Engine) error { return e.Prefill() }) }

// Decode enqueues one decode step on every rank (each replays its own
// captured graph, NCCL calls included, where graphs are on).
func (g *Group) Decode() error { return g.Do(func(_ int, e *Engine) error { return e.Decode() }) }

// Sync waits for every rank's stream.
func (g *Group) Sync() error { return g.Do(func(_ int, e *Engine) error { return e.Sync() }) }

// groupEvent is one event per rank, in the group's rank order.
type groupEvent struct {
	g   *Group
	evs []Event
}

// Record records every rank's event on its stream.
func (ev *groupEvent) Record() error {
	return ev.g.each(func(r *groupRank) error { return ev.evs[ev.g.index(r)].Record() })
}

func (g *Group) index(r *groupRank) int { return slices.Index(g.ranks, r) }

// NewEvent makes an event on every rank.
func (g *Group) NewEvent() (Event, error) {
	ev := &groupEvent{g: g, evs: make([]Event, len(g.ranks))}
	err := g.each(func(r *groupRank) (err error) {
		ev.evs[g.index(r)], err = r.e.NewEvent()
		return err
	})
	return ev, err
}

// RankElapsed is each rank's device time between two recorded events, in
// the order of Ranks.
func (g *Group) RankElapsed(start, end Event) ([]time.Duration, error) {
	s, ok1 := start.(*groupEvent)
	e, ok2 := end.(*groupEvent)
	if !ok1 || !ok2 || s.g != g || e.g != g {
		return nil, errors.New("elapsed: not events of this group")
	}
	out := make([]time.Duration, len(g.ranks))
	err := g.each(func(r *groupRank) (err error) {
		i := g.index(r)
		out[i], err = r.e.Elapsed(s.evs[i], e.evs[i])
		return err
	})
	return out, err
}

// Elapsed is the slowest rank's device time between two events: a step is
// done when its last rank is.
func (g *Group) Elapsed(start, end Event) (time.Duration, error) {
	per, err := g.RankElapsed(start, end)
	if err != nil {
		return 0, err
	}
	return slices.Max(per), nil
}

// NextTokens is each sequence's latest greedy token (the same on every
// rank: the first rank's). Every rank reads its own, so that a rank whose
// stream failed says so, rather than the first waiting for it forever.
func (g *Group) NextTokens() ([]int32, error) {
	per := make([][]int32, len(g.ranks))
	err := g.each(func(r *groupRank) (err error) { per[g.index(r)], err = r.e.NextTokens(); return err })
	if err != nil {
		return nil, err
	}
	return per[0], nil
}

// ForceNextTokens makes every rank's next decode step read ids (one per
// sequence) instead of its own greedy tokens, as Engine.ForceNextTokens.
func (g *Group) ForceNextTokens(ids []int32) error {
	return g.Do(func(_ int, e *Engine) error { return e.ForceNextTokens(ids) })
}

// Logits gathers every rank's vocabulary slice of the last step's logits
// into [batch][vocab]; it needs every rank in this process.
func (g *Group) Logits() ([][]float32, error) {
	if len(g.ranks) != g.size {
		return nil, fmt.Errorf("logits: ranks %v of %d are here, the others' vocabulary slices are not", g.Ranks(), g.size)
	}
	parts := make([][][]float32, g.size)
	if err := g.Do(func(rank int, e *Engine) (err error) { parts[rank], err = e.Logits(); return err }); err != nil {
		return nil, err
	}
	out := make([][]float32, len(parts[0]))
	for b := range out {
		for _, p := range parts {
			out[b] = append(out[b], p[b]...)
		}
	}
	return out, nil
}

// Close closes every engine and backend on its rank's goroutine and ends
// the goroutines, dead group or not (a backend whose collectives were
// aborted does not leave its communicator again).
func (g *Group) Close() error {
	err := g.run(g.ranks, func(r *groupRank) error {
		var errs []error
		if r.e != nil {
			errs = append(errs, r.e.Close())
			r.e = nil
		}
		if r.be != nil {
			errs = append(errs, r.be.Close())
			r.be = nil
		}
		return errors.Join(errs...)
	}, false)
	g.stop()
	return err
}

// stop ends the rank goroutines; every later call fails with errGroupClosed.
func (g *Group) stop() {
	for _, r := range g.ranks {
		close(r.work)
	}
	g.ranks = nil
	if g.dead == nil {
		g.dead = errGroupClosed
	}
}

// errGroupClosed is what a closed group's calls return.
var errGroupClosed = errors.New("tensor-parallel group: closed")
