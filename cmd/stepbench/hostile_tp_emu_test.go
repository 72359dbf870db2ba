package main

import (
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"stepbench/internal/seeded"
)

// Strangers at node 0's port cannot break a two-node run (issue 31): random
// bytes, an HTTP request and a half-open connection sent to node 0 before
// node 1 starts are dropped and logged, and the two nodes then run. The
// random bytes or the GET aborted node 0 at once (node 1 then timed out),
// and node 0 listened on every interface, not on the address given.
func TestEmulatedRendezvousDropsStrangers(t *testing.T) {
	seeded.Expect(t, "strangers at the rendezvous")
	onEmulator(t)
	addr := freeLoopbackAddr(t)
	start := func(node int) (*exec.Cmd, *strings.Builder) {
		cmd := exec.Command(os.Args[0], "run", "--device", "cuda", "--model", "llama-tiny", "--batch-size", "1", "--input-len", "4",
			"--output-len", "2", "--num-iters", "1", "--num-iters-warmup", "0", "--tp-size", "2", "--nnodes", "2",
			"--node-rank", strconv.Itoa(node), "--dist-init-addr", addr, "--dist-timeout", "60s")
		cmd.Env = append(os.Environ(), "STEPBENCH_TEST_MAIN=1", "XDG_CACHE_HOME="+emuCacheHome)
		var b strings.Builder
		cmd.Stdout, cmd.Stderr = &b, &b
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill() })
		return cmd, &b
	}
	node0, out0 := start(0)
	halfOpen := dialUntil(t, addr, 60*time.Second)
	defer halfOpen.Close()
	for _, garbage := range []string{"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 random bytes\n", "GET / HTTP/1.1\r\nHost: x\r\n\r\n"} {
		conn := dialUntil(t, addr, time.Second)
		if _, err := conn.Write([]byte(garbage)); err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(conn)
		conn.Close()
	}
	if host, _ := nonLoopbackIP(); host != "" {
		_, port, _ := net.SplitHostPort(addr)
		if conn, err := net.DialTimeout("tcp", net.JoinHostPort(host, port), time.Second); err == nil {
			conn.Close()
			t.Errorf("node 0 at %s also listens on %s", addr, host)
		}
	}
	node1, out1 := start(1)
	for i, cmd := range []*exec.Cmd{node0, node1} {
		if err := cmd.Wait(); err != nil {
			t.Errorf("node %d: %v\n%s", i, err, []*strings.Builder{out0, out1}[i])
		}
	}
	if n := strings.Count(out0.String(), "node 0: dropped a connection from 127.0.0.1"); n != 2 {
		t.Errorf("node 0 logged %d dropped connections, want 2:\n%s", n, out0)
	}
}

// freeLoopbackAddr is a loopback address no one listens on.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// dialUntil connects to addr, retrying until within passes.
func dialUntil(t *testing.T, addr string, within time.Duration) net.Conn {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			return conn
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens at %s after %s: %v", addr, within, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// nonLoopbackIP is an IPv4 address of this machine's other than loopback,
// "" when it has none.
func nonLoopbackIP() (string, error) {
	addrs, err := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipnet, ok := a.(*net.IPNet); ok && !ipnet.IP.IsLoopback() && ipnet.IP.To4() != nil {
			return ipnet.IP.String(), nil
		}
	}
	return "", err
}
