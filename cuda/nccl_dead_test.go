package cuda

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"stepbench/cuda/emutest"
	"stepbench/internal/seeded"
)

// TestNCCLEmulatedDeadPeer kills rank 1's process (SIGKILL) after a first
// all-reduce across two processes: while idle (the parent kills it), and
// inside its second collective holding the segment's lock
// (STEPBENCH_EMU_NCCL_DIE=1:2). Rank 0's second all-reduce fails naming the
// dead rank and its pid, well within the 600 s NCCL timeout, and the
// segment's name is gone after it. Before, the mutex was not robust: a
// process that died holding it left rank 0 blocked for good, and every
// killed run left its segment in /dev/shm.
func TestNCCLEmulatedDeadPeer(t *testing.T) {
	emutest.Use(t)
	if rank := os.Getenv("STEPBENCH_TEST_NCCL_DEAD_RANK"); rank != "" {
		deadPeerRank(t, rank, os.Getenv("STEPBENCH_TEST_NCCL_ID"))
		return
	}
	seeded.Expect(t, "an NCCL peer killed, idle and holding the lock")
	for _, tc := range []struct {
		name, die, want string
	}{
		{"killed while idle", "", "died without leaving the communicator"},
		{"killed holding the lock", "1:2", "died holding the communicator's lock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			idFile := filepath.Join(t.TempDir(), "id")
			var cmds []*exec.Cmd
			var outs []*bytes.Buffer
			for rank := 0; rank < 2; rank++ {
				cmd := exec.Command(os.Args[0], "-test.run=^TestNCCLEmulatedDeadPeer$", "-test.v")
				cmd.Env = append(os.Environ(), "STEPBENCH_TEST_NCCL_DEAD_RANK="+strconv.Itoa(rank), "STEPBENCH_TEST_NCCL_ID="+idFile,
					"STEPBENCH_EMU_NCCL_TIMEOUT_S=600", "STEPBENCH_EMU_NCCL_DIE="+tc.die)
				var b bytes.Buffer
				cmd.Stdout, cmd.Stderr = &b, &b
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				cmds, outs = append(cmds, cmd), append(outs, &b)
			}
			if tc.die == "" {
				waitForFile(t, idFile+".joined1")
				if err := cmds[1].Process.Kill(); err != nil {
					t.Fatal(err)
				}
			}
			done := make(chan error, 1)
			go func() { done <- cmds[0].Wait() }()
			select {
			case err := <-done:
				if err != nil || !strings.Contains(outs[0].String(), "--- PASS") || !strings.Contains(outs[0].String(), tc.want) {
					t.Errorf("rank 0: %v\n%s", err, outs[0])
				}
				for _, line := range strings.Split(outs[0].String(), "\n") {
					if strings.Contains(line, "rank 0: ") {
						t.Log(strings.TrimSpace(line))
					}
				}
			case <-time.After(60 * time.Second):
				cmds[0].Process.Kill()
				t.Fatalf("rank 0 still waits 60 s after rank 1 died:\n%s", outs[0])
			}
			err := cmds[1].Wait()
			if ws, ok := cmds[1].ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Errorf("rank 1 did not die of SIGKILL: %v\n%s", err, outs[1])
			}
		})
	}
}

func waitForFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 30 s", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// deadPeerRank is one process of TestNCCLEmulatedDeadPeer.
func deadPeerRank(t *testing.T, rankText, idFile string) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rank, _ := strconv.Atoi(rankText)
	nccl, err := OpenNCCL("")
	if err != nil {
		t.Fatal(err)
	}
	var id NCCLUniqueID
	if rank == 0 {
		if id, err = nccl.UniqueID(); err != nil {
			t.Fatal(err)
		}
		writeFileAtomic(t, idFile, []byte(hex.EncodeToString(id[:])))
	} else {
		waitForFile(t, idFile)
		text, _ := os.ReadFile(idFile)
		raw, _ := hex.DecodeString(string(text))
		copy(id[:], raw)
	}
	drv, err := OpenDriver()
	if err != nil {
		t.Fatal(err)
	}
	r := &rankEnv{}
	if r.ctx, err = drv.NewContext(0); err != nil {
		t.Fatal(err)
	}
	defer r.ctx.Close()
	if r.stream, err = r.ctx.NewStream(); err != nil {
		t.Fatal(err)
	}
	if r.comm, err = nccl.InitRank(2, id, rank); err != nil {
		t.Fatal(err)
	}
	send, recv := r.upload(t, []float32{float32(rank + 1)}), r.upload(t, []float32{0})
	if err := r.comm.AllReduce(send, recv, 1, NCCLFloat32, NCCLSum, r.stream); err != nil {
		t.Fatal(err)
	}
	if got := r.download(t, recv, 1); got[0] != 3 {
		t.Fatalf("rank %d: all-reduce = %v", rank, got)
	}
	if rank == 1 && os.Getenv("STEPBENCH_EMU_NCCL_DIE") == "" {
		writeFileAtomic(t, idFile+".joined1", nil)
		select {} // idle until the parent kills this process
	}
	err = r.comm.AllReduce(send, recv, 1, NCCLFloat32, NCCLSum, r.stream)
	if err == nil {
		err = r.stream.Sync()
	}
	if rank == 1 {
		t.Fatal("rank 1 outlived the collective it was to die in")
	}
	if err == nil || !strings.Contains(err.Error(), "the process of rank 1 (pid ") {
		t.Fatalf("rank 0: an all-reduce after rank 1 died: %v", err)
	}
	t.Logf("rank 0: %v", err)
	if err := r.comm.Abort(); err != nil {
		t.Error(err)
	}
	name := strings.TrimPrefix(string(bytes.TrimRight(id[:], "\x00")), "SBEMU-NCCL-3")
	if _, err := os.Stat("/dev/shm" + name); !os.IsNotExist(err) {
		t.Errorf("segment /dev/shm%s is still there: %v", name, err)
	}
}

func writeFileAtomic(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// A segment left by a run whose processes all died (nothing survived to
// remove it) is removed by the next ncclGetUniqueId; one whose creator
// lives is kept.
func TestNCCLEmulatedSweepsStaleSegments(t *testing.T) {
	emutest.Use(t)
	nccl, err := OpenNCCL("")
	if err != nil {
		t.Fatal(err)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := fmt.Sprintf("/dev/shm/sbemu-nccl-%d-00000000000000000000000000000022", dead.Process.Pid)
	live := fmt.Sprintf("/dev/shm/sbemu-nccl-%d-00000000000000000000000000000023", os.Getpid())
	for _, p := range []string{stale, live} {
		if err := os.WriteFile(p, make([]byte, 8<<10), 0o600); err != nil {
			t.Skip("no /dev/shm:", err)
		}
	}
	defer os.Remove(live)
	if _, err := nccl.UniqueID(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		os.Remove(stale)
		t.Errorf("the stale segment %s is still there (%v)", stale, err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the segment of a live process was removed: %v", err)
	}
}
