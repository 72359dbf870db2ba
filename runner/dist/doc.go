// Package dist is the rendezvous of a tensor-parallel run over several
// nodes: node 0 makes the NCCL unique id and hands it, over TCP at
// --dist-init-addr, to every other node (as SGLang's launcher does), after
// checking that the node runs the same job. The exchange, one connection
// per node:
//
//	node k → node 0:  "stepbench-nccl-id 2 NODE_RANK NNODES TP_SIZE WORK\n"
//	node 0 → node k:  "ok\n" and the id bytes, or "error MESSAGE\n"
//
// WORK is what every node must run identically (Work: model, seed, shapes,
// iterations, kernel versions, graphs), quoted. Nodes started with
// different flags stop with one line naming the first difference instead of
// hanging in NCCL or timing different work. The package knows nothing of
// NCCL or CUDA: the id is bytes.
package dist
