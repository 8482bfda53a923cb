// Package pprofenv writes CPU and heap profiles of a running nsgate, asked
// for through the environment, for the measurements in
// docs/performance.md.
package pprofenv

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"time"

	"github.com/nsgate/nsgate/internal/diag/hoptrace"
	"github.com/nsgate/nsgate/internal/diag/starttrace"
)

// Start writes a CPU profile of this process to the file named by
// NSGATE_CPUPROFILE, an execution trace (runtime/trace: every goroutine
// wake-up and switch, for the latency hops) to NSGATE_EXECTRACE.PID, and a heap profile to NSGATE_MEMPROFILE every 2 s,
// for the measurements in docs/performance.md; and opens the start-up
// trace named by NSGATE_STARTTRACE (see starttrace.Mark). The returned func
// stops and flushes them.
func Start() (stop func()) {
	starttrace.Start()
	cpu, mem := os.Getenv("NSGATE_CPUPROFILE"), os.Getenv("NSGATE_MEMPROFILE")
	os.Unsetenv("NSGATE_CPUPROFILE")
	os.Unsetenv("NSGATE_MEMPROFILE")
	var tf *os.File
	if name := os.Getenv("NSGATE_EXECTRACE"); name != "" {
		os.Unsetenv("NSGATE_EXECTRACE")
		var err error
		if tf, err = os.Create(fmt.Sprintf("%s.%d", name, os.Getpid())); err == nil {
			err = trace.Start(tf)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "nsgate: NSGATE_EXECTRACE: %v\n", err)
			os.Exit(125)
		}
	}
	var f *os.File
	if cpu != "" {
		var err error
		if f, err = os.Create(cpu); err != nil {
			fmt.Fprintf(os.Stderr, "nsgate: NSGATE_CPUPROFILE: %v\n", err)
			os.Exit(125)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "nsgate: NSGATE_CPUPROFILE: %v\n", err)
			os.Exit(125)
		}
	}
	if mem != "" {
		// Flows are held while the worker runs, not at exit: write the
		// heap profile (and a line of memory statistics) every 2 s.
		go func() {
			for range time.Tick(2 * time.Second) {
				if mf, err := os.Create(mem); err == nil {
					pprof.WriteHeapProfile(mf)
					mf.Close()
				}
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				fmt.Fprintf(os.Stderr, "nsgate: memory: heap in use %d KiB, stacks %d KiB, from the OS %d KiB, %d goroutines\n",
					ms.HeapInuse>>10, ms.StackInuse>>10, ms.Sys>>10, runtime.NumGoroutine())
			}
		}()
	}
	return func() {
		hoptrace.Flush()
		if tf != nil {
			trace.Stop()
			tf.Close()
		}
		if f != nil {
			pprof.StopCPUProfile()
			f.Close()
		}
	}
}
