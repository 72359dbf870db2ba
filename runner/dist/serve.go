package dist

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"
)

// ServeOptions are node 0's deadlines and where it logs.
type ServeOptions struct {
	// Timeout is how long node 0 waits for every other node.
	Timeout time.Duration
	// HelloTimeout is how long one connection may take to send its hello
	// (0: DefaultHelloTimeout); one that sends nothing is dropped after it.
	HelloTimeout time.Duration
	// Log gets one line per connection dropped (the first maxLogged) and
	// a warning for a listening address no other machine can reach.
	Log io.Writer
}

const (
	// DefaultHelloTimeout is ServeOptions.HelloTimeout's default.
	DefaultHelloTimeout = 10 * time.Second
	// maxPending bounds the connections waiting for their hello at once;
	// more are closed as they come (a real node retries).
	maxPending = 64
	// maxLogged bounds the dropped connections logged one by one.
	maxLogged = 8
)

// Listen listens at addr as node 0 does: on the host given (a name is
// resolved; an empty host is the loopback address, 127.0.0.1; 0.0.0.0
// is every interface), never on every interface unasked.
func Listen(addr string) (net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--dist-init-addr %q: %w", addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return nil, fmt.Errorf("--dist-init-addr %s: node 0 cannot listen there (its HOST must be an address of node 0's own; 0.0.0.0 is every interface): %w", addr, err)
	}
	return ln, nil
}

// Serve is node 0's side: it listens at addr (Listen) until every other
// node of job has the id, or opt.Timeout passes. What is no stepbench
// node's hello (other bytes, an HTTP request, a connection that sends
// nothing within opt.HelloTimeout, a line too long) is dropped and logged,
// and the wait goes on. A stepbench node that runs other work or another
// protocol version, or a rank not missing, is told why and ends the wait
// with that error: its flags differ from node 0's.
func Serve(addr string, job Job, id []byte, opt ServeOptions) error {
	ln, err := Listen(addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	warnLoopback(addr, ln, opt.Log)
	return serve(ln, addr, job, id, opt)
}

// warnLoopback says when addr names a host that resolved to a loopback
// address here (a name /etc/hosts maps to 127.0.1.1): other machines
// cannot connect there.
func warnLoopback(addr string, ln net.Listener, log io.Writer) {
	host, _, _ := net.SplitHostPort(addr)
	tcp, ok := ln.Addr().(*net.TCPAddr)
	if log == nil || host == "" || net.ParseIP(host) != nil || !ok || !tcp.IP.IsLoopback() {
		return
	}
	fmt.Fprintf(log, "stepbench: --dist-init-addr %s: %s is %s here, a loopback address no other machine reaches (give node 0's own address)\n",
		addr, host, tcp.IP)
}

// helloLine is what one connection sent: its first line, or why not.
type helloLine struct {
	conn net.Conn
	line string
	err  error
}

// serve accepts connections on ln, reading each one's hello on its own
// goroutine (a slow or silent one holds up no other), and answers the
// hellos in turn.
func serve(ln net.Listener, addr string, job Job, id []byte, opt ServeOptions) error {
	deadline := time.Now().Add(opt.Timeout)
	helloTimeout := cmpOr(opt.HelloTimeout, DefaultHelloTimeout)
	if tl, ok := ln.(*net.TCPListener); ok {
		if err := tl.SetDeadline(deadline); err != nil {
			return fmt.Errorf("--dist-init-addr %s: %w", addr, err)
		}
	}
	done := make(chan struct{})
	defer close(done)
	conns, acceptErr := acceptLoop(ln, done)
	hellos := make(chan helloLine)
	drops := &dropLog{w: opt.Log}
	served, pending := []int{}, 0
	for len(served) < job.NNodes-1 {
		select {
		case conn := <-conns:
			if pending >= maxPending {
				drops.drop(conn.RemoteAddr(), fmt.Sprintf("%d connections already wait for their hello", maxPending))
				conn.Close()
				continue
			}
			pending++
			until := time.Now().Add(helloTimeout)
			if until.After(deadline) {
				until = deadline
			}
			go readHello(conn, until, hellos, done)
		case h := <-hellos:
			pending--
			node, drop, err := answer(h, job, id, served, helloTimeout)
			h.conn.Close()
			switch {
			case drop != "":
				drops.drop(h.conn.RemoteAddr(), drop)
			case err != nil:
				return err
			default:
				served = append(served, node)
			}
		case err := <-acceptErr:
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				missing := missingNodes(job.NNodes, served)
				return fmt.Errorf("--dist-init-addr %s: after %s, nodes %v (ranks %v) never connected%s", addr, opt.Timeout, missing,
					job.ranksOf(missing...), drops.summary())
			}
			return fmt.Errorf("--dist-init-addr %s: %w", addr, err)
		}
	}
	return nil
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// acceptLoop accepts on ln until it fails (its deadline, or a close),
// handing each connection over until done.
func acceptLoop(ln net.Listener, done <-chan struct{}) (<-chan net.Conn, <-chan error) {
	conns, errs := make(chan net.Conn), make(chan error, 1)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				errs <- err
				return
			}
			select {
			case conns <- conn:
			case <-done:
				conn.Close()
				return
			}
		}
	}()
	return conns, errs
}

// readHello reads conn's first line, at most maxHelloBytes, by deadline.
func readHello(conn net.Conn, deadline time.Time, out chan<- helloLine, done <-chan struct{}) {
	h := helloLine{conn: conn}
	if h.err = conn.SetReadDeadline(deadline); h.err == nil {
		h.line, h.err = bufio.NewReader(io.LimitReader(conn, maxHelloBytes)).ReadString('\n')
	}
	select {
	case out <- h:
	case <-done:
		conn.Close()
	}
}

// answer answers one connection's hello: the node it served, or why the
// connection is dropped (drop: no stepbench node's), or the error that
// ends the wait (a stepbench node that may not join, told why).
func answer(h helloLine, job Job, id []byte, served []int, writeTimeout time.Duration) (node int, drop string, err error) {
	if err := h.conn.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return 0, err.Error(), nil
	}
	var ne net.Error
	switch {
	case h.err != nil && errors.As(h.err, &ne) && ne.Timeout():
		return 0, fmt.Sprintf("no hello within its deadline (%d bytes)", len(h.line)), nil
	case h.err == io.EOF && len(h.line) >= maxHelloBytes:
		return 0, fmt.Sprintf("no hello in its first %d bytes", maxHelloBytes), nil
	case h.err != nil:
		return 0, fmt.Sprintf("closed before its hello (%d bytes: %v)", len(h.line), h.err), nil
	}
	peer, helloErr := ParseHello(h.line)
	if errors.Is(helloErr, errStranger) {
		fmt.Fprintf(h.conn, "error not a stepbench node's hello\n")
		return 0, helloErr.Error(), nil
	}
	if why := refusal(peer, helloErr, job, served); why != "" {
		fmt.Fprintf(h.conn, "error %s\n", why)
		return 0, "", fmt.Errorf("--dist-init-addr: %s", why)
	}
	if _, err := h.conn.Write(append([]byte("ok\n"), id...)); err != nil {
		return 0, "", fmt.Errorf("--dist-init-addr: sending the NCCL id to node %d: %w", peer.NodeRank, err)
	}
	return peer.NodeRank, "", nil
}

// refusal is why a stepbench node may not join, "" when it may.
func refusal(peer Job, helloErr error, job Job, served []int) string {
	switch {
	case helloErr != nil:
		return helloErr.Error()
	case peer.NNodes != job.NNodes || peer.TPSize != job.TPSize:
		return fmt.Sprintf("node %d runs --nnodes %d --tp-size %d, node 0 --nnodes %d --tp-size %d",
			peer.NodeRank, peer.NNodes, peer.TPSize, job.NNodes, job.TPSize)
	case peer.NodeRank < 1 || peer.NodeRank >= job.NNodes || slices.Contains(served, peer.NodeRank):
		return fmt.Sprintf("--node-rank %d is not one of the missing nodes %v", peer.NodeRank, missingNodes(job.NNodes, served))
	case peer.Fingerprint() != job.Fingerprint():
		return fmt.Sprintf("node %d runs other work than node 0: %s", peer.NodeRank, WorkDifference(peer.Work, job.Work))
	}
	return ""
}

// dropLog logs dropped connections: the first maxLogged one by one, and
// how many in all.
type dropLog struct {
	w     io.Writer
	n     int
	first string
}

func (d *dropLog) drop(from net.Addr, why string) {
	d.n++
	if d.first == "" {
		d.first = fmt.Sprintf("%s: %s", from, why)
	}
	if d.w != nil && d.n <= maxLogged {
		fmt.Fprintf(d.w, "stepbench: node 0: dropped a connection from %s, no stepbench node's: %s\n", from, why)
	}
}

// summary is what the timeout's error adds: the connections dropped.
func (d *dropLog) summary() string {
	if d.n == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d connections dropped that were no stepbench node's; the first from %s)", d.n, d.first)
}

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

func missingNodes(nnodes int, served []int) []int {
	var out []int
	for n := 1; n < nnodes; n++ {
		if !slices.Contains(served, n) {
			out = append(out, n)
		}
	}
	return out
}
