package dist

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"stepbench/runner"
)

// freeAddr is a loopback address no one listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// serveInBackground runs node 0's side; wait returns its error.
func serveInBackground(addr string, job Job, id []byte) (wait func() error) {
	var wg sync.WaitGroup
	var err error
	wg.Add(1)
	go func() {
		defer wg.Done()
		err = Serve(addr, job, id, 30*time.Second)
	}()
	return func() error { wg.Wait(); return err }
}

// Node 0 serves every other node once; a node with other flags, or none at
// all, is a clear error on both sides.
func TestIDExchange(t *testing.T) {
	addr := freeAddr(t)
	id := bytes.Repeat([]byte{7}, 128)
	job := Job{NNodes: 3, TPSize: 6, Work: "model=llama-tiny seed=42 batch-size=1,2"}
	wait := serveInBackground(addr, job, id)
	for node := 1; node <= 2; node++ {
		j := job
		j.NodeRank = node
		got, err := Fetch(addr, j, 128, 30*time.Second)
		if err != nil || !bytes.Equal(got, id) {
			t.Errorf("node %d: id %v, %v", node, got, err)
		}
	}
	if err := wait(); err != nil {
		t.Errorf("node 0: %v", err)
	}

	for _, tc := range []struct {
		peer Job
		want string
	}{
		{Job{NNodes: 3, NodeRank: 1, TPSize: 3}, "node 1 runs --nnodes 3 --tp-size 3, node 0 --nnodes 3 --tp-size 6"},
		{Job{NNodes: 3, NodeRank: 2, TPSize: 6, Work: "model=llama-tiny seed=7 batch-size=1,2"}, `node 2 runs other work than node 0: seed "7", node 0 "42"`},
		{Job{NNodes: 3, NodeRank: 3, TPSize: 6, Work: job.Work}, "--node-rank 3 is not one of the missing nodes [1 2]"},
	} {
		wait := serveInBackground(addr, job, id)
		_, err := Fetch(addr, tc.peer, 128, 30*time.Second)
		serveErr := wait()
		if err == nil || !strings.Contains(err.Error(), tc.want) || serveErr == nil || !strings.Contains(serveErr.Error(), tc.want) {
			t.Errorf("%+v: node %d %v, node 0 %v; want both to say %q", tc.peer, tc.peer.NodeRank, err, serveErr, tc.want)
		}
	}
	if err := Serve(addr, job, id, 50*time.Millisecond); err == nil || !strings.Contains(err.Error(), "nodes [1 2] (ranks [2 3 4 5]) never connected") {
		t.Errorf("no node came: %v", err)
	}
	if _, err := Fetch(addr, Job{NNodes: 2, NodeRank: 1, TPSize: 2}, 128, 50*time.Millisecond); err == nil ||
		!strings.Contains(err.Error(), "node 0 (ranks [0]) not reachable") {
		t.Errorf("no node 0: %v", err)
	}
	// A node that dies while it connects (no hello) does not end node 0's
	// wait for it: the error then names the node and its ranks.
	wait = func() func() error {
		done := make(chan error, 1)
		go func() { done <- Serve(addr, job, id, 2*time.Second) }()
		return func() error { return <-done }
	}()
	for {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			conn.Close()
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := wait(); err == nil || !strings.Contains(err.Error(), "nodes [1 2] (ranks [2 3 4 5]) never connected") {
		t.Errorf("a connection without a hello: %v", err)
	}
}

// Something that is no stepbench node (a web browser, an older stepbench)
// is refused, and node 0 says what it sent.
func TestServeRefusesAStranger(t *testing.T) {
	addr := freeAddr(t)
	wait := serveInBackground(addr, Job{NNodes: 2, TPSize: 2}, make([]byte, 128))
	var conn net.Conn
	var err error
	for range 100 {
		if conn, err = net.Dial("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	answer := make([]byte, 200)
	n, _ := conn.Read(answer)
	if serveErr := wait(); serveErr == nil || !strings.Contains(serveErr.Error(), `"GET / HTTP/1.1" is not a stepbench node's hello`) ||
		!strings.HasPrefix(string(answer[:n]), "error ") {
		t.Errorf("node 0: %v; answered %q", serveErr, answer[:n])
	}
}

func TestWorkDifference(t *testing.T) {
	tests := []struct{ got, want, diff string }{
		{"a=1 b=2", "a=1 b=2", ""},
		{"a=1 b=3", "a=1 b=2", `b "3", node 0 "2"`},
		{"a=1", "a=1 b=2", `b "", node 0 "2"`},
		{"a=1 c=5", "a=1", `c "5", node 0 ""`},
	}
	for _, tt := range tests {
		if d := WorkDifference(tt.got, tt.want); d != tt.diff {
			t.Errorf("WorkDifference(%q, %q) = %q, want %q", tt.got, tt.want, d, tt.diff)
		}
	}
}

// Every field of Work is an item of its string, so that two nodes that
// differ in any of them are told which.
func TestWorkNamesEveryField(t *testing.T) {
	cfg, err := runner.Preset("llama-tiny")
	if err != nil {
		t.Fatal(err)
	}
	base := Work{Model: cfg, LoadFormat: "dummy", Seed: 42, BatchSizes: []int{1, 8}, InputLens: []int{1024}, OutputLens: []int{16},
		NumIters: 10, WarmupIters: 1, KernelVersions: "attn_prefill=2 argmax=2"}
	want := "model=llama-tiny/h128/l4/heads4/kv2/v4096/i384 load-format=dummy seed=42 batch-size=1,8 input-len=1024 output-len=16 " +
		"num-iters=10 num-iters-warmup=1 correctness-test=false prompt-ids=cbf29ce484222325 kernel=attn_prefill=2,argmax=2 disable-cuda-graph=false kv-cache="
	if got := base.String(); got != want {
		t.Errorf("Work.String:\n got %s\nwant %s", got, want)
	}
	for _, tc := range []struct {
		change func(*Work)
		key    string
	}{
		{func(w *Work) { w.Model.NumHiddenLayers = 5 }, "model"},
		{func(w *Work) { w.LoadFormat = "safetensors" }, "load-format"},
		{func(w *Work) { w.Seed = 7 }, "seed"},
		{func(w *Work) { w.BatchSizes = []int{1} }, "batch-size"},
		{func(w *Work) { w.InputLens = []int{512} }, "input-len"},
		{func(w *Work) { w.OutputLens = []int{2} }, "output-len"},
		{func(w *Work) { w.NumIters = 3 }, "num-iters"},
		{func(w *Work) { w.WarmupIters = 0 }, "num-iters-warmup"},
		{func(w *Work) { w.CorrectnessTest = true }, "correctness-test"},
		{func(w *Work) { w.Prompts = [][]int32{{1, 2}} }, "prompt-ids"},
		{func(w *Work) { w.KernelVersions = "attn_prefill=1 argmax=2" }, "kernel"},
		{func(w *Work) { w.DisableCUDAGraph = true }, "disable-cuda-graph"},
		{func(w *Work) { w.KVCache = "paged 16" }, "kv-cache"},
	} {
		other := base
		tc.change(&other)
		if d := WorkDifference(other.String(), base.String()); !strings.HasPrefix(d, tc.key+" ") {
			t.Errorf("changing %s: difference %q", tc.key, d)
		}
	}
}

// Node 0 reads hellos from the network: any line either parses or is
// refused with an error (never a panic), and every hello a node writes
// parses back to its job.
func FuzzParseHello(f *testing.F) {
	f.Add(Job{NNodes: 2, NodeRank: 1, TPSize: 8, Work: "model=llama-3-70b seed=1"}.Hello(), 2, 1, 8, "model=x seed=1")
	f.Add("stepbench-nccl-id 1 1 2 8\n", 1, 0, 1, "")
	f.Add("stepbench-nccl-id 2 1 2 8 \"unterminated\n", 3, 2, 4, "a=b c=\"d\"")
	f.Add("GET / HTTP/1.1\r\n", 4, 3, 2, "k=\xff")
	f.Fuzz(func(t *testing.T, line string, nnodes, nodeRank, tpSize int, work string) {
		if j, err := ParseHello(line); err == nil && !strings.HasPrefix(line, helloPrefix) {
			t.Errorf("%q parsed as %+v without the hello prefix", line, j)
		}
		want := Job{NNodes: nnodes, NodeRank: nodeRank, TPSize: tpSize, Work: work}
		got, err := ParseHello(want.Hello())
		if err != nil || got != want {
			t.Errorf("hello %q of %+v parsed as %+v, %v", want.Hello(), want, got, err)
		}
	})
}

func TestLocalRanks(t *testing.T) {
	for _, tc := range []struct {
		job  Job
		want string
	}{
		{Job{NNodes: 1, TPSize: 4}, "[0 1 2 3]"},
		{Job{NNodes: 2, NodeRank: 1, TPSize: 16}, "[8 9 10 11 12 13 14 15]"},
		{Job{NNodes: 4, NodeRank: 3, TPSize: 4}, "[3]"},
	} {
		if got := fmt.Sprint(tc.job.LocalRanks()); got != tc.want {
			t.Errorf("%+v: ranks %s, want %s", tc.job, got, tc.want)
		}
	}
}
