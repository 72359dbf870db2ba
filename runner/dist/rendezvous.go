package dist

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"time"
)

// helloPrefix starts every node's hello; its number is the protocol's version.
const helloPrefix = "stepbench-nccl-id 2"

// maxHelloBytes bounds what node 0 reads from one connection.
const maxHelloBytes = 4096

// Job is what the nodes must agree on.
type Job struct {
	NNodes, NodeRank, TPSize int
	// Work is "key=value" items separated by spaces (no quotes inside);
	// Work.String makes it.
	Work string
}

// Hello is the line node NodeRank sends node 0.
func (j Job) Hello() string {
	return fmt.Sprintf("%s %d %d %d %q\n", helloPrefix, j.NodeRank, j.NNodes, j.TPSize, j.Work)
}

// ParseHello reads a node's hello line (what Hello writes).
func ParseHello(line string) (Job, error) {
	var j Job
	rest, ok := strings.CutPrefix(line, helloPrefix)
	if ok {
		_, err := fmt.Sscanf(rest, " %d %d %d %q\n", &j.NodeRank, &j.NNodes, &j.TPSize, &j.Work)
		ok = err == nil
	}
	if !ok {
		return Job{}, fmt.Errorf("%.80q is not a stepbench node's hello (same stepbench version on every node?)", strings.TrimSpace(line))
	}
	return j, nil
}

// WorkDifference names the first item of want that got lacks or sets
// otherwise, "" when the two agree.
func WorkDifference(got, want string) string {
	items := func(s string) map[string]string {
		m := map[string]string{}
		for _, kv := range strings.Fields(s) {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
		return m
	}
	g, w := items(got), items(want)
	keys := make([]string, 0, len(w)+len(g))
	for _, kv := range strings.Fields(want + " " + got) {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		if g[k] != w[k] {
			return fmt.Sprintf("%s %q, node 0 %q", k, g[k], w[k])
		}
	}
	return ""
}

// Serve is node 0's side: it listens on addr's port (all interfaces) until
// every other node of job has the id, or timeout passes.
func Serve(addr string, job Job, id []byte, timeout time.Duration) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--dist-init-addr %q: %w", addr, err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("", port))
	if err != nil {
		return fmt.Errorf("--dist-init-addr %s: node 0 cannot listen: %w", addr, err)
	}
	defer ln.Close()
	deadline := time.Now().Add(timeout)
	if err := ln.(*net.TCPListener).SetDeadline(deadline); err != nil {
		return fmt.Errorf("--dist-init-addr %s: %w", addr, err)
	}
	served := []int{}
	for len(served) < job.NNodes-1 {
		conn, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				missing := missingNodes(job.NNodes, served)
				return fmt.Errorf("--dist-init-addr %s: after %s, nodes %v (ranks %v) never connected", addr, timeout, missing, job.ranksOf(missing...))
			}
			return fmt.Errorf("--dist-init-addr %s: %w", addr, err)
		}
		node, err := answer(conn, job, id, deadline, served)
		conn.Close()
		if errors.Is(err, errNoHello) {
			continue // a node that died while it connected, or no node: wait for the missing ones
		}
		if err != nil {
			return err
		}
		served = append(served, node)
	}
	return nil
}

// errNoHello is answer's error for a connection that closed before its hello.
var errNoHello = errors.New("sent no hello")

// ranksOf are the communicator ranks of nodes.
func (j Job) ranksOf(nodes ...int) []int {
	var ranks []int
	per := j.TPSize / max(j.NNodes, 1)
	for _, n := range nodes {
		for i := range per {
			ranks = append(ranks, n*per+i)
		}
	}
	return ranks
}

// answer reads one node's hello and sends it the id, or the reason it may not join.
func answer(conn net.Conn, job Job, id []byte, deadline time.Time, served []int) (int, error) {
	if err := conn.SetDeadline(deadline); err != nil {
		return 0, err
	}
	line, err := bufio.NewReader(io.LimitReader(conn, maxHelloBytes)).ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("--dist-init-addr: a connection from %s %w: %w", conn.RemoteAddr(), errNoHello, err)
	}
	peer, helloErr := ParseHello(line)
	var why string
	switch {
	case helloErr != nil:
		why = helloErr.Error()
	case peer.NNodes != job.NNodes || peer.TPSize != job.TPSize:
		why = fmt.Sprintf("node %d runs --nnodes %d --tp-size %d, node 0 --nnodes %d --tp-size %d",
			peer.NodeRank, peer.NNodes, peer.TPSize, job.NNodes, job.TPSize)
	case peer.NodeRank < 1 || peer.NodeRank >= job.NNodes || slices.Contains(served, peer.NodeRank):
		why = fmt.Sprintf("--node-rank %d is not one of the missing nodes %v", peer.NodeRank, missingNodes(job.NNodes, served))
	case WorkDifference(peer.Work, job.Work) != "":
		why = fmt.Sprintf("node %d runs other work than node 0: %s", peer.NodeRank, WorkDifference(peer.Work, job.Work))
	}
	if why != "" {
		fmt.Fprintf(conn, "error %s\n", why)
		return 0, fmt.Errorf("--dist-init-addr: %s", why)
	}
	if _, err := conn.Write(append([]byte("ok\n"), id...)); err != nil {
		return 0, fmt.Errorf("--dist-init-addr: sending the NCCL id to node %d: %w", peer.NodeRank, err)
	}
	return peer.NodeRank, nil
}

func missingNodes(nnodes int, served []int) []int {
	var out []int
	for n := 1; n < nnodes; n++ {
		if !slices.Contains(served, n) {
			out = append(out, n)
		}
	}
	return out
}

// Fetch is the other nodes' side: it connects to node 0 at addr, retrying
// until timeout (node 0 may start later), and returns the id of idBytes
// bytes.
func Fetch(addr string, job Job, idBytes int, timeout time.Duration) ([]byte, error) {
	deadline := time.Now().Add(timeout)
	var conn net.Conn
	var err error
	for {
		conn, err = net.DialTimeout("tcp", addr, time.Until(deadline))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("--dist-init-addr %s: node 0 (ranks %v) not reachable after %s: %w", addr, job.ranksOf(0), timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer conn.Close()
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, err
	}
	if _, err := io.WriteString(conn, job.Hello()); err != nil {
		return nil, fmt.Errorf("--dist-init-addr %s: %w", addr, err)
	}
	r := bufio.NewReader(conn)
	status, err := r.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("--dist-init-addr %s: no answer from node 0 (ranks %v): %w", addr, job.ranksOf(0), err)
	}
	if why, ok := strings.CutPrefix(status, "error "); ok {
		return nil, fmt.Errorf("--dist-init-addr %s: node 0 refused: %s", addr, strings.TrimSpace(why))
	}
	if status != "ok\n" {
		return nil, fmt.Errorf("--dist-init-addr %s: node 0 answered %q", addr, strings.TrimSpace(status))
	}
	id := make([]byte, idBytes)
	if _, err := io.ReadFull(r, id); err != nil {
		return nil, fmt.Errorf("--dist-init-addr %s: reading the NCCL id from node 0 (ranks %v): %w", addr, job.ranksOf(0), err)
	}
	return id, nil
}

// LocalRanks are the communicator ranks node NodeRank drives, TPSize/NNodes
// of them; the node's GPU i runs the i-th.
func (j Job) LocalRanks() []int {
	per := j.TPSize / j.NNodes
	ranks := make([]int, per)
	for i := range ranks {
		ranks[i] = j.NodeRank*per + i
	}
	return ranks
}
