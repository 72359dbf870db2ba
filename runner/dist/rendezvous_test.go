package dist

import (
	"bytes"
	"fmt"
	"io"
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
		err = Serve(addr, job, id, ServeOptions{Timeout: 30 * time.Second})
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
	if err := Serve(addr, job, id, ServeOptions{Timeout: 50 * time.Millisecond}); err == nil || !strings.Contains(err.Error(), "nodes [1 2] (ranks [2 3 4 5]) never connected") {
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
		go func() { done <- Serve(addr, job, id, ServeOptions{Timeout: 500 * time.Millisecond}) }()
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

// dialWhenUp connects to addr once node 0 listens there.
func dialWhenUp(t *testing.T, addr string) net.Conn {
	t.Helper()
	for range 500 {
		if conn, err := net.Dial("tcp", addr); err == nil {
			return conn
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("node 0 never listened at %s", addr)
	return nil
}

// lockedBuffer is a log node 0 writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Strangers cannot break the rendezvous: random bytes, an HTTP request, a
// line past the hello's bound, a hello with a forged fingerprint and a
// half-open connection that sends nothing, all before the real node, are
// dropped and logged, and node 0 waits on until node 1 joins. Random bytes
// or an HTTP GET aborted node 0 at once; a half-open connection held its
// wait until the deadline.
func TestServeDropsStrangers(t *testing.T) {
	addr := freeAddr(t)
	job := Job{NNodes: 2, TPSize: 2, Work: "model=llama-tiny seed=42"}
	id := bytes.Repeat([]byte{9}, 128)
	log := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- Serve(addr, job, id, ServeOptions{Timeout: 20 * time.Second, HelloTimeout: 300 * time.Millisecond, Log: log})
	}()
	halfOpen := dialWhenUp(t, addr)
	defer halfOpen.Close()
	forged := strings.Replace(Job{NNodes: 2, NodeRank: 1, TPSize: 2, Work: job.Work}.Hello(), job.Fingerprint(), "0123456789abcdef", 1)
	strangers := []string{"\x00\xff\x13random bytes\x7f\n", "GET / HTTP/1.1\r\nHost: node0\r\n\r\n",
		strings.Repeat("x", maxHelloBytes+10), forged}
	for _, garbage := range strangers {
		conn := dialWhenUp(t, addr)
		if _, err := conn.Write([]byte(garbage)); err != nil {
			t.Fatal(err)
		}
		answer, _ := io.ReadAll(conn)
		conn.Close()
		if !strings.HasPrefix(string(answer), "error ") && len(answer) != 0 {
			t.Errorf("%.30q: answered %q", garbage, answer)
		}
	}
	node1 := job
	node1.NodeRank = 1
	got, err := Fetch(addr, node1, len(id), 20*time.Second)
	if err != nil || !bytes.Equal(got, id) {
		t.Errorf("node 1 after the strangers: id %v, %v", got, err)
	}
	if err := <-done; err != nil {
		t.Errorf("node 0: %v", err)
	}
	for _, want := range []string{"random bytes", "GET / HTTP/1.1", "no hello in its first 4096 bytes", "a malformed hello", "no stepbench node's"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("node 0's log lacks %q:\n%s", want, log.String())
		}
	}
}

// A stranger that sends nothing is dropped after the hello's deadline and
// named when node 0 gives up.
func TestServeTimeoutNamesTheDroppedConnections(t *testing.T) {
	addr := freeAddr(t)
	done := make(chan error, 1)
	go func() {
		done <- Serve(addr, Job{NNodes: 2, TPSize: 2}, make([]byte, 8), ServeOptions{Timeout: 400 * time.Millisecond, HelloTimeout: 50 * time.Millisecond})
	}()
	conn := dialWhenUp(t, addr)
	defer conn.Close()
	err := <-done
	if err == nil || !strings.Contains(err.Error(), "nodes [1] (ranks [1]) never connected (1 connections dropped") ||
		!strings.Contains(err.Error(), "no hello within its deadline") {
		t.Errorf("node 0: %v", err)
	}
}

// A stepbench node of another protocol version is told so and ends node
// 0's wait: its flags are not node 0's (an older stepbench).
func TestServeRefusesAnotherVersion(t *testing.T) {
	addr := freeAddr(t)
	done := make(chan error, 1)
	go func() {
		done <- Serve(addr, Job{NNodes: 2, TPSize: 2}, make([]byte, 8), ServeOptions{Timeout: 20 * time.Second})
	}()
	conn := dialWhenUp(t, addr)
	defer conn.Close()
	if _, err := io.WriteString(conn, "stepbench-nccl-id 2 1 2 2 \"\"\n"); err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(conn)
	if err := <-done; err == nil || !strings.Contains(err.Error(), "another protocol version than 3") || !strings.HasPrefix(string(answer), "error ") {
		t.Errorf("node 0: %v; answered %q", err, answer)
	}
}

// Node 0 listens on the host given, never on every interface unasked: an
// empty host is loopback.
func TestListenOnTheAddressGiven(t *testing.T) {
	for _, tc := range []struct{ host, want string }{{"127.0.0.1", "127.0.0.1"}, {"", "127.0.0.1"}, {"localhost", "127.0.0.1"}} {
		_, port, _ := net.SplitHostPort(freeAddr(t))
		ln, err := Listen(net.JoinHostPort(tc.host, port))
		if err != nil {
			if tc.host == "localhost" {
				continue // no IPv4 localhost here
			}
			t.Fatal(err)
		}
		got := ln.Addr().(*net.TCPAddr).IP.String()
		ln.Close()
		if got != tc.want && !(tc.host == "localhost" && got == "::1") {
			t.Errorf("host %q: listens on %s, want %s", tc.host, got, tc.want)
		}
	}
	if _, err := Listen("192.0.2.1:1"); err == nil || !strings.Contains(err.Error(), "must be an address of node 0's own") {
		t.Errorf("an address not of this machine: %v", err)
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
	f.Add("stepbench-nccl-id 3 1 2 8 0123456789abcdef \"x\"\n", 2, 1, 2, "")
	f.Add("stepbench-nccl-id 99999999999999999999 1\n", 2, 1, 2, "")
	f.Add("GET / HTTP/1.1\r\n", 4, 3, 2, "k=\xff")
	f.Fuzz(func(t *testing.T, line string, nnodes, nodeRank, tpSize int, work string) {
		if j, err := ParseHello(line); err == nil && (!strings.HasPrefix(line, helloPrefix) || !strings.Contains(line, j.Fingerprint())) {
			t.Errorf("%q parsed as %+v without the hello prefix or its fingerprint", line, j)
		} else if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: a multi-line error %q", line, err)
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

// Node 0's answer to any first line: what lacks the magic (or is
// malformed) is dropped without ending the wait and without an answer
// other than an "error" line; what ends the wait is a stepbench node's
// hello, told why it may not join; nothing panics.
func FuzzHandshake(f *testing.F) {
	job := Job{NNodes: 2, TPSize: 2, Work: "model=llama-tiny seed=42"}
	node1 := job
	node1.NodeRank = 1
	f.Add(node1.Hello())
	f.Add("GET / HTTP/1.1\r\n")
	f.Add("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\n")
	f.Add("stepbench-nccl-id 3 1 2 2 0123456789abcdef \"x\"\n")
	f.Add("stepbench-nccl-id 2 1 2 2 \"\"\n")
	f.Fuzz(func(t *testing.T, line string) {
		a, b := net.Pipe()
		defer a.Close()
		answered := make(chan string, 1)
		go func() {
			data, _ := io.ReadAll(io.LimitReader(b, 1<<16))
			answered <- string(data)
		}()
		node, drop, err := answer(helloLine{conn: a, line: line}, job, make([]byte, 8), nil, time.Second)
		a.Close()
		got := <-answered
		b.Close()
		switch {
		case !strings.HasPrefix(line, helloMagic+" ") && (drop == "" || err != nil):
			t.Errorf("%q without the magic: drop %q, err %v", line, drop, err)
		case drop != "" && err != nil:
			t.Errorf("%q: both dropped (%q) and an error %v", line, drop, err)
		case err == nil && drop == "" && (node != 1 || !strings.HasPrefix(got, "ok\n")):
			t.Errorf("%q: served node %d, answered %q", line, node, got)
		case (err != nil || drop != "") && got != "" && !strings.HasPrefix(got, "error "):
			t.Errorf("%q: refused, but answered %q", line, got)
		}
	})
}
