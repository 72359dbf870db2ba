package cuda

import (
	"fmt"
	"sync/atomic"
)

// Watcher is told of every call of this package that may block the host
// for as long as the device or a library takes: a stream's or an event's
// synchronisation (behind a kernel that never returns), a module load, a
// compile, an op library's load and calls. Enter comes before the call and
// Leave after it; kind says what sort of call it is (a compile may take
// longer than a step) and what names it, formatted only when asked. The
// CLI's --step-timeout is one (over internal/watchdog's Dog).
type Watcher interface {
	Enter(kind CallKind, what fmt.Stringer) (token int64)
	Leave(token int64)
}

// CallKind is the sort of a watched call.
type CallKind int

const (
	// DeviceWork waits for the device: a synchronisation.
	DeviceWork CallKind = iota
	// Compile is an NVRTC compile.
	Compile
	// ModuleLoad loads a cubin.
	ModuleLoad
	// LibraryLoad opens and initialises an op library (dlopen, its
	// constructors, stepbench_op_get).
	LibraryLoad
	// LibraryCall is a call of an op library's op.
	LibraryCall
)

type watcherBox struct{ w Watcher }

var watcher atomic.Pointer[watcherBox]

// SetWatcher sets the Watcher of every later call (nil: none). Without one
// a call costs one atomic load more.
func SetWatcher(w Watcher) {
	if w == nil {
		watcher.Store(nil)
		return
	}
	watcher.Store(&watcherBox{w})
}

// watch tells the Watcher, if any, that the call what starts; the function
// it returns says it ended.
func watch(kind CallKind, what fmt.Stringer) (leave func()) {
	box := watcher.Load()
	if box == nil {
		return func() {}
	}
	token := box.w.Enter(kind, what)
	return func() { box.w.Leave(token) }
}

// watched says whether a Watcher is set (so that a call may skip making
// its description).
func watched() bool { return watcher.Load() != nil }

// callText is a call's fixed description.
type callText string

func (c callText) String() string { return string(c) }

// graphLaunchName is what a stream's last launch is after a graph's.
var graphLaunchName = "a captured CUDA graph"

// streamSync describes a stream's synchronisation: what it waits for is the
// stream's work, whose last launch it names.
type streamSync Stream

func (s *streamSync) String() string {
	last := "no kernel of ours; a library's"
	if name := (*Stream)(s).last.Load(); name != nil {
		last = *name
	}
	return fmt.Sprintf("the device's work (a kernel that never returns? the stream's last launch: %s)", last)
}
