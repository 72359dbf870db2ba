// Package dist is the rendezvous of a tensor-parallel run over several
// nodes: node 0 makes the NCCL unique id and hands it, over TCP at
// --dist-init-addr, to every other node (as SGLang's launcher does), after
// checking that the node runs the same job. The exchange, one connection
// per node:
//
//	node k → node 0:  "stepbench-nccl-id 3 NODE_RANK NNODES TP_SIZE FINGERPRINT WORK\n"
//	node 0 → node k:  "ok\n" and the id bytes, or "error MESSAGE\n"
//
// The magic and the version (3) start the hello; FINGERPRINT is the run's
// (Job.Fingerprint: the node counts and the work, hashed). WORK is what
// every node must run identically (Work: model, seed, shapes, iterations,
// kernel versions, graphs), quoted. Nodes started with different flags
// stop with one line naming the first difference instead of hanging in
// NCCL or timing different work. Node 0 listens on the address given only
// (Listen), reads every connection's hello on its own goroutine within a
// deadline and a byte bound, and drops what is no stepbench node's (other
// bytes, an HTTP request, silence), waiting on for the real nodes. The
// package knows nothing of NCCL or CUDA: the id is bytes.
package dist
