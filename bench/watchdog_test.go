package bench

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// stuckTarget's n-th Sync blocks (a kernel that never returns) until
// released.
type stuckTarget struct {
	fakeTarget
	syncs, stuckAt int
	release        chan struct{}
}

func (s *stuckTarget) Sync() error {
	s.syncs++
	if s.syncs == s.stuckAt {
		<-s.release
	}
	return s.fakeTarget.Sync()
}

// A region stuck past the step timeout is reported from outside it while
// it is still stuck, naming the region; if the report returns, the region's
// error is the timeout and the run stops after it, the shape before it
// kept. The report holds off the run: nothing is written while it runs.
func TestStepTimeoutReportsAStuckRegion(t *testing.T) {
	// Per iteration of output length 3: 3 regions of 2 syncs. Shape 1
	// (batch 1): warmup + 2 timed = 18 syncs, shape 2's warmup prefill's
	// second sync is the 20th.
	target := &stuckTarget{stuckAt: 20, release: make(chan struct{})}
	opt := testOptions()
	opt.OutputLens = []int{3}
	opt.StepTimeout = 20 * time.Millisecond
	var mu sync.Mutex
	var reported []error
	opt.OnStepTimeout = func(err error) {
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
		close(target.release) // the report comes while the region is stuck
	}
	var written []Shape
	opt.AfterShape = func(s ShapeResult) error {
		written = append(written, s.Shape)
		return nil
	}
	shapes, err := Run(target, opt)
	if !errors.Is(err, ErrStepTimeout) ||
		!strings.Contains(err.Error(), "the prefill of batch_size=2 input_len=4 output_len=3, warmup 1 did not finish within 20ms") {
		t.Errorf("Run: %v", err)
	}
	if len(reported) != 1 || reported[0].Error() != strings.TrimPrefix(err.Error(), "shape batch_size=2 input_len=4 output_len=3: warmup 0: prefill: ") {
		t.Errorf("reported %v", reported)
	}
	if len(shapes) != 1 || len(written) != 1 || written[0].Batch != 1 {
		t.Errorf("%d shapes, %v written; want the first shape's", len(shapes), written)
	}
}

// Regions that end in time never report, however many there are.
func TestStepTimeoutQuietWhenInTime(t *testing.T) {
	opt := testOptions()
	opt.StepTimeout = time.Hour
	opt.OnStepTimeout = func(err error) { t.Errorf("reported %v", err) }
	if _, err := Run(&fakeTarget{}, opt); err != nil {
		t.Fatal(err)
	}
}
