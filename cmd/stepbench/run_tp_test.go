package main

import (
	"bytes"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// Bad tensor-parallel flags are refused in one line, exit 2, before
// anything is loaded.
func TestTPFlagsRefused(t *testing.T) {
	base := []string{"run", "--model", "llama-tiny", "--input-len", "4", "--output-len", "4", "--num-iters", "1"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--device", "cuda", "--tp-size", "3"}, "--tp-size: tensor-parallel size 3 does not divide llama-tiny's 4 attention heads"},
		{[]string{"--device", "cpu", "--tp-size", "2"}, "--tp-size runs ranks on the cuda backend through NCCL; the cpu backend is one rank"},
		{[]string{"--device", "cuda", "--tp-size", "0"}, "--tp-size: 0 must be at least 1"},
		{[]string{"--device", "cuda", "--tp-size", "3", "--nnodes", "2", "--dist-init-addr", "h:1"}, "--nnodes must divide --tp-size"},
		{[]string{"--device", "cuda", "--tp-size", "2", "--nnodes", "2"}, "--nnodes 2 needs --dist-init-addr"},
		{[]string{"--device", "cuda", "--tp-size", "2", "--nnodes", "2", "--node-rank", "2", "--dist-init-addr", "h:1"}, "--node-rank 2: must be 0..1"},
		{[]string{"--device", "cuda", "--dist-init-addr", "h:1"}, "are for runs over several nodes"},
		{[]string{"--device", "cuda", "--nccl", "/x/libnccl.so.2"}, "--nccl is for tensor parallelism"},
		{[]string{"--device", "cuda", "--tp-size", "2", "--breakdown", "--disable-cuda-graph"}, "--breakdown times one GPU's ops"},
	} {
		code, _, stderr := run(t, append(base, tc.args...)...)
		lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
		if code != exitUsage || !strings.Contains(stderr, tc.want) || len(lines) != 1 {
			t.Errorf("%v: exit %d, stderr %q; want one line containing %q", tc.args, code, stderr, tc.want)
		}
	}
	// Over several nodes adaptive sampling would desynchronise the nodes.
	code, _, stderr := run(t, "run", "--model", "llama-tiny", "--device", "cuda", "--tp-size", "2", "--nnodes", "2",
		"--dist-init-addr", "h:1")
	if code != exitUsage || !strings.Contains(stderr, "needs --num-iters N") {
		t.Errorf("--nnodes 2 without --num-iters: exit %d, %q", code, stderr)
	}
}

// More ranks than the node's GPUs: refused before anything loads (the
// emulated device has one GPU unless told otherwise).
func TestTPMoreRanksThanGPUs(t *testing.T) {
	onEmulator(t)
	code, _, stderr := run(t, "run", "--device", "cuda", "--model", "llama-tiny", "--tp-size", "2", "--input-len", "4",
		"--output-len", "2", "--num-iters", "1")
	if code != exitUsage || !strings.Contains(stderr, "--tp-size 2 over 1 node(s) needs 2 GPUs on this node, 1 visible") ||
		strings.Count(stderr, "\n") != 1 {
		t.Errorf("exit %d, stderr %q; want one line, exit 2", code, stderr)
	}
}

// The id exchange of multi-node runs: node 0 serves every other node once;
// a node with other flags, or none at all, is a clear error.
func TestDistIDExchange(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	id := bytes.Repeat([]byte{7}, 128)
	job := distJob{nnodes: 3, tpSize: 6, work: "model=llama-tiny seed=42 batch-size=1,2"}
	var wg sync.WaitGroup
	var serveErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		serveErr = serveID(addr, job, id, 30*time.Second)
	}()
	for node := 1; node <= 2; node++ {
		j := job
		j.nodeRank = node
		got, err := fetchID(addr, j, 128, 30*time.Second)
		if err != nil || !bytes.Equal(got, id) {
			t.Errorf("node %d: id %v, %v", node, got[:4], err)
		}
	}
	wg.Wait()
	if serveErr != nil {
		t.Errorf("node 0: %v", serveErr)
	}

	wg.Add(1)
	go func() {
		defer wg.Done()
		serveErr = serveID(addr, job, id, 30*time.Second)
	}()
	_, err = fetchID(addr, distJob{nnodes: 3, nodeRank: 1, tpSize: 3}, 128, 30*time.Second)
	wg.Wait()
	want := "node 1 runs --nnodes 3 --tp-size 3, node 0 --nnodes 3 --tp-size 6"
	if err == nil || !strings.Contains(err.Error(), want) || serveErr == nil || !strings.Contains(serveErr.Error(), want) {
		t.Errorf("mismatched flags: node 1 %v, node 0 %v; want both to say %q", err, serveErr, want)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		serveErr = serveID(addr, job, id, 30*time.Second)
	}()
	_, err = fetchID(addr, distJob{nnodes: 3, nodeRank: 2, tpSize: 6, work: "model=llama-tiny seed=7 batch-size=1,2"}, 128, 30*time.Second)
	wg.Wait()
	want = `node 2 runs other work than node 0: seed "7", node 0 "42"`
	if err == nil || !strings.Contains(err.Error(), want) || serveErr == nil || !strings.Contains(serveErr.Error(), want) {
		t.Errorf("other work: node 2 %v, node 0 %v; want both to say %q", err, serveErr, want)
	}
	if err := serveID(addr, job, id, 50*time.Millisecond); err == nil || !strings.Contains(err.Error(), "nodes [1 2] (ranks [2 3 4 5]) never connected") {
		t.Errorf("no node came: %v", err)
	}
	if _, err := fetchID(addr, distJob{nnodes: 2, nodeRank: 1, tpSize: 2}, 128, 50*time.Millisecond); err == nil ||
		!strings.Contains(err.Error(), "node 0 (ranks [0]) not reachable") {
		t.Errorf("no node 0: %v", err)
	}
	// A node that dies while it connects (no hello) does not end node 0's
	// wait for it: the error then names the node and its ranks.
	wg.Add(1)
	go func() {
		defer wg.Done()
		serveErr = serveID(addr, job, id, 2*time.Second)
	}()
	for {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			conn.Close()
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	wg.Wait()
	if serveErr == nil || !strings.Contains(serveErr.Error(), "nodes [1 2] (ranks [2 3 4 5]) never connected") {
		t.Errorf("a connection without a hello: %v", serveErr)
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
		if d := workDifference(tt.got, tt.want); d != tt.diff {
			t.Errorf("workDifference(%q, %q) = %q, want %q", tt.got, tt.want, d, tt.diff)
		}
	}
}

// Node 0 reads hellos from the network: any line either parses or is
// refused with an error (never a panic), and every hello a node writes
// parses back to its job.
func FuzzParseHello(f *testing.F) {
	f.Add(distJob{nnodes: 2, nodeRank: 1, tpSize: 8, work: "model=llama-3-70b seed=1"}.hello(), 2, 1, 8, "model=x seed=1")
	f.Add("stepbench-nccl-id 1 1 2 8\n", 1, 0, 1, "")
	f.Add("stepbench-nccl-id 2 1 2 8 \"unterminated\n", 3, 2, 4, "a=b c=\"d\"")
	f.Add("GET / HTTP/1.1\r\n", 4, 3, 2, "k=\xff")
	f.Fuzz(func(t *testing.T, line string, nnodes, nodeRank, tpSize int, work string) {
		if j, err := parseHello(line); err == nil && !strings.HasPrefix(line, idHello) {
			t.Errorf("%q parsed as %+v without the hello prefix", line, j)
		}
		want := distJob{nnodes: nnodes, nodeRank: nodeRank, tpSize: tpSize, work: work}
		got, err := parseHello(want.hello())
		if err != nil || got != want {
			t.Errorf("hello %q of %+v parsed as %+v, %v", want.hello(), want, got, err)
		}
	})
}
