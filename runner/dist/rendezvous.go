package dist

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"time"
)

// helloMagic starts every node's hello, and helloVersion follows it:
// the protocol's version (3: the fingerprint). A connection whose first
// bytes are not the magic is no stepbench node.
const (
	helloMagic   = "stepbench-nccl-id"
	helloVersion = 3
	helloPrefix  = helloMagic + " 3"
)

// maxHelloBytes bounds what node 0 reads from one connection.
const maxHelloBytes = 4096

// Job is what the nodes must agree on.
type Job struct {
	NNodes, NodeRank, TPSize int
	// Work is "key=value" items separated by spaces (no quotes inside);
	// Work.String makes it.
	Work string
}

// Fingerprint is the run's fingerprint: the first 16 hex digits of the
// sha256 of what every node must agree on (the node counts and the work).
func (j Job) Fingerprint() string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%d %d %q", j.NNodes, j.TPSize, j.Work))
	return hex.EncodeToString(sum[:8])
}

// Hello is the line node NodeRank sends node 0: the magic, the version,
// the node's rank, the node counts, the fingerprint and the work.
func (j Job) Hello() string {
	return fmt.Sprintf("%s %d %d %d %s %q\n", helloPrefix, j.NodeRank, j.NNodes, j.TPSize, j.Fingerprint(), j.Work)
}

// errStranger wraps ParseHello's error for a line without the magic: not a
// stepbench node (a port scanner, a browser), which node 0 drops.
var errStranger = errors.New("not a stepbench node")

// ParseHello reads a node's hello line (what Hello writes). A line without
// the magic is errStranger's; one of another version, or whose fingerprint
// is not its own fields', says so.
func ParseHello(line string) (Job, error) {
	var j Job
	var version int
	var fingerprint string
	rest, ok := strings.CutPrefix(line, helloMagic+" ")
	if !ok {
		return Job{}, fmt.Errorf("%.80q: %w", strings.TrimSpace(line), errStranger)
	}
	if _, err := fmt.Sscanf(rest, "%d ", &version); err != nil || version != helloVersion {
		return Job{}, fmt.Errorf("%.80q is a stepbench node's hello of another protocol version than %d (the same stepbench version on every node?)",
			strings.TrimSpace(line), helloVersion)
	}
	rest = strings.TrimPrefix(rest, fmt.Sprint(version))
	_, err := fmt.Sscanf(rest, " %d %d %d %s %q\n", &j.NodeRank, &j.NNodes, &j.TPSize, &fingerprint, &j.Work)
	if err != nil || fingerprint != j.Fingerprint() {
		return Job{}, fmt.Errorf("%.80q: a malformed hello (fingerprint %.16q): %w", strings.TrimSpace(line), fingerprint, errStranger)
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

// Fetch is the other nodes' side: it connects to node 0 at addr, retrying
// until timeout (node 0 may start later, or close a connection unanswered
// while strangers fill its queue), and returns the id of idBytes bytes.
func Fetch(addr string, job Job, idBytes int, timeout time.Duration) ([]byte, error) {
	deadline := time.Now().Add(timeout)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Until(deadline))
		if err == nil {
			var id []byte
			var retry bool
			id, retry, err = fetchOnce(conn, addr, job, idBytes, deadline)
			conn.Close()
			if !retry {
				return id, err
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("--dist-init-addr %s: node 0 (ranks %v) not reachable after %s: %w", addr, job.ranksOf(0), timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// maxStatusBytes bounds node 0's status line.
const maxStatusBytes = 4096

// fetchOnce sends the hello on conn and reads the id; retry says node 0
// closed the connection before it answered.
func fetchOnce(conn net.Conn, addr string, job Job, idBytes int, deadline time.Time) (id []byte, retry bool, err error) {
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, false, err
	}
	if _, err := io.WriteString(conn, job.Hello()); err != nil {
		return nil, true, fmt.Errorf("--dist-init-addr %s: %w", addr, err)
	}
	r := bufio.NewReader(io.LimitReader(conn, maxStatusBytes+int64(idBytes)))
	status, err := r.ReadString('\n')
	switch {
	case err != nil && status == "" && !errors.Is(err, os.ErrDeadlineExceeded):
		return nil, true, fmt.Errorf("--dist-init-addr %s: node 0 (ranks %v) closed the connection unanswered: %w", addr, job.ranksOf(0), err)
	case err != nil:
		return nil, false, fmt.Errorf("--dist-init-addr %s: no answer from node 0 (ranks %v): %w", addr, job.ranksOf(0), err)
	}
	if why, ok := strings.CutPrefix(status, "error "); ok {
		return nil, false, fmt.Errorf("--dist-init-addr %s: node 0 refused: %s", addr, strings.TrimSpace(why))
	}
	if status != "ok\n" {
		return nil, false, fmt.Errorf("--dist-init-addr %s: node 0 answered %.80q", addr, strings.TrimSpace(status))
	}
	id = make([]byte, idBytes)
	if _, err := io.ReadFull(r, id); err != nil {
		return nil, false, fmt.Errorf("--dist-init-addr %s: reading the NCCL id from node 0 (ranks %v): %w", addr, job.ranksOf(0), err)
	}
	return id, false, nil
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
