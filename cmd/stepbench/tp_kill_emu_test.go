package main

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"stepbench/internal/seeded"
)

// twoNodes is a --tp-size 2 run as two processes of one emulated GPU each
// meeting on loopback, with short timeouts: the nodes' TCP meeting and the
// emulated NCCL's wait give up after timeout.
type twoNodes struct {
	cmds    [2]*exec.Cmd
	outs    [2]*bytes.Buffer
	done    [2]chan struct{}
	started time.Time
}

const twoNodeTimeout = 3 * time.Second

var killCount = 10

func startTwoNodes(t *testing.T) *twoNodes {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	n := &twoNodes{started: time.Now()}
	for node := range 2 {
		cmd := exec.Command(os.Args[0], "run", "--device", "cuda", "--model", "llama-tiny", "--tp-size", "2", "--nnodes", "2",
			"--node-rank", strconv.Itoa(node), "--dist-init-addr", addr, "--dist-timeout", twoNodeTimeout.String(),
			"--batch-size", "1", "--input-len", "8", "--output-len", "8", "--num-iters", "2", "--num-iters-warmup", "0",
			"--no-telemetry")
		cmd.Env = append(os.Environ(), "STEPBENCH_TEST_MAIN=1", "XDG_CACHE_HOME="+emuCacheHome,
			fmt.Sprintf("STEPBENCH_EMU_NCCL_TIMEOUT_S=%d", int(twoNodeTimeout.Seconds())))
		n.outs[node] = &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = n.outs[node], n.outs[node]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		n.cmds[node], n.done[node] = cmd, make(chan struct{})
		go func() {
			_ = cmd.Wait()
			close(n.done[node])
		}()
	}
	return n
}

// waitNode waits for node to exit, killing both after limit.
func (n *twoNodes) waitNode(t *testing.T, node int, limit time.Duration) bool {
	select {
	case <-n.done[node]:
		return true
	case <-time.After(limit):
		for _, c := range n.cmds {
			_ = c.Process.Kill()
		}
		<-n.done[0]
		<-n.done[1]
		return false
	}
}

// TestEmulatedTwoNodesKilled kills one node of a two-node run with SIGKILL
// at a random time, 10 times: the other always exits 1 within the
// timeouts, naming the dead node's rank, and no NCCL segment is left in
// /dev/shm. Before, node 0 once waited for 21 minutes on a mutex the dead
// node held, and every killed run left its 8 MiB segment behind.
func TestEmulatedTwoNodesKilled(t *testing.T) {
	seeded.Expect(t, "a node killed by SIGKILL mid-run")
	onEmulator(t)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 6))
	t.Logf("seed %d", seed)
	var duration time.Duration
	for range 2 { // the first compiles the kernels into the cache; the second is the run's time
		clean := startTwoNodes(t)
		for node := range 2 {
			if !clean.waitNode(t, node, 120*time.Second) || clean.cmds[node].ProcessState.ExitCode() != 0 {
				t.Fatalf("node %d of a run without a kill: %v\n%s", node, clean.cmds[node].ProcessState, clean.outs[node])
			}
		}
		duration = time.Since(clean.started)
	}
	var worst time.Duration
	phases := map[string]int{}
	for kills := 0; kills < killCount; {
		n := startTwoNodes(t)
		victim := rng.IntN(2)
		survivor := 1 - victim
		time.Sleep(time.Duration(rng.Int64N(int64(duration * 4 / 5))))
		select {
		case <-n.done[survivor]: // it ended before the kill: not a case
			n.waitNode(t, victim, 60*time.Second)
			continue
		default:
		}
		if err := n.cmds[victim].Process.Signal(syscall.SIGKILL); errors.Is(err, os.ErrProcessDone) {
			// The victim ended first (its part done): not a case either.
			n.waitNode(t, survivor, 60*time.Second)
			n.waitNode(t, victim, 10*time.Second)
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		kills++
		if !n.waitNode(t, survivor, 3*twoNodeTimeout+5*time.Second) {
			t.Fatalf("kill %d: node %d still runs %s after node %d was killed:\n%s", kills, survivor, 3*twoNodeTimeout+5*time.Second, victim, n.outs[survivor])
		}
		n.waitNode(t, victim, 10*time.Second)
		if n.cmds[survivor].ProcessState.ExitCode() == 0 {
			// Every collective had finished (the survivor completed the whole
			// run, which needs the victim's part): the kill came after the work.
			kills--
			continue
		}
		worst = max(worst, time.Since(killed))
		out := n.outs[survivor].String()
		named := strings.Contains(out, fmt.Sprintf("rank %d ", victim)) || strings.Contains(out, fmt.Sprintf("ranks [%d]", victim)) ||
			strings.Contains(out, fmt.Sprintf("for ranks %d", victim)) || strings.Contains(out, fmt.Sprintf("rank %d (pid", victim))
		if code := n.cmds[survivor].ProcessState.ExitCode(); code != exitFailure || !named {
			t.Errorf("kill %d of node %d: node %d exit %d, want 1 and the dead rank %d named:\n%s", kills, victim, survivor, code, victim, out)
		}
		for _, crash := range []string{"panic", "fatal error", "goroutine "} {
			if strings.Contains(out, crash) {
				t.Errorf("kill %d: node %d crashed:\n%s", kills, survivor, out)
			}
		}
		phases[killPhase(out)]++
		if left := append(shmSegmentsOf(n.cmds[0].Process.Pid), shmSegmentsOf(n.cmds[1].Process.Pid)...); len(left) > 0 {
			t.Errorf("kill %d of node %d (%s): segments left: %v\nnode 0:\n%s\nnode 1:\n%s", kills, victim, killPhase(out), left, n.outs[0], n.outs[1])
		}
		t.Logf("kill %d: node %d at %.2f s; node %d exited %.2f s later (%s)", kills, victim, killed.Sub(n.started).Seconds(), survivor,
			time.Since(killed).Seconds(), killPhase(out))
	}
	t.Logf("%d kills (a run without one: %.1f s); the survivor exited at most %.1f s after the kill; it was in: %v",
		killCount, duration.Seconds(), worst.Seconds(), phases)
}

// killPhase says where the survivor learnt of the death, from its error.
func killPhase(out string) string {
	switch {
	case strings.Contains(out, "--dist-init-addr"):
		return "the TCP meeting"
	case strings.Contains(out, "ncclCommInitRank"):
		return "ncclCommInitRank"
	case strings.Contains(out, "died"):
		return "a collective (a dead process)"
	}
	return "other"
}
