package handoffbench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime/metrics"
	"strconv"
	"syscall"
	"time"
)

// Cost is what one hand-off cost the benchmark's process: both clients
// of the side, their libraries, the independent watcher and the harness
// (the servers are other processes). Sides take turns in one process, so
// each round's cost is that side's; the other sides' idle clients add
// their background (renewals, pings), the same for every side.
type Cost struct {
	CPU      time.Duration // user + system CPU time (getrusage)
	Allocs   uint64        // heap objects allocated (runtime/metrics)
	Switches int64         // context switches of the process's threads, voluntary and not: threads that slept and were woken, or were preempted
	Syscalls int64         // read and write system calls (/proc/self/io: syscr + syscw), the network I/O
}

// costSample is the process's counters at one instant.
type costSample struct {
	cpu      time.Duration
	allocs   uint64
	switches int64
	syscalls int64
}

var allocsMetric = []metrics.Sample{{Name: "/gc/heap/allocs:objects"}}

func sampleCost() costSample {
	var s costSample
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		s.switches = ru.Nvcsw + ru.Nivcsw
	}
	metrics.Read(allocsMetric)
	if v := allocsMetric[0].Value; v.Kind() == metrics.KindUint64 {
		s.allocs = v.Uint64()
	}
	s.syscalls = ioSyscalls()
	return s
}

// ioSyscalls is the process's read and write system calls so far, or 0
// where /proc/self/io cannot be read.
func ioSyscalls() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	var n int64
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := bytes.Cut(sc.Bytes(), []byte(": "))
		if ok && (string(k) == "syscr" || string(k) == "syscw") {
			x, _ := strconv.ParseInt(string(v), 10, 64)
			n += x
		}
	}
	return n
}

// since is the cost from s to now. Reading /proc/self/io is itself a read
// system call: it is taken off.
func (s costSample) since() Cost {
	e := sampleCost()
	return Cost{CPU: e.cpu - s.cpu, Allocs: e.allocs - s.allocs, Switches: e.switches - s.switches, Syscalls: max(0, e.syscalls-s.syscalls-1)}
}

// costMedians formats the medians of a side's costs as table cells:
// "CPU | allocations | switches | syscalls".
func costMedians(cs []Cost) string {
	var cpu, allocs, sw, sys []time.Duration
	for _, c := range cs {
		cpu = append(cpu, c.CPU)
		allocs = append(allocs, time.Duration(c.Allocs))
		sw = append(sw, time.Duration(c.Switches))
		sys = append(sys, time.Duration(c.Syscalls))
	}
	return fmt.Sprintf("%d µs | %d | %d | %d", Quantile(cpu, 0.5).Microseconds(), int64(Quantile(allocs, 0.5)),
		int64(Quantile(sw, 0.5)), int64(Quantile(sys, 0.5)))
}
