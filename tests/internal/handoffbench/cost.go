package handoffbench

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
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
	Created  uint64        // goroutines created
	Wakeups  uint64        // goroutines that went from runnable to running: the scheduler's latencies recorded, times 8 (the runtime samples one transition in 8 of each goroutine)
	Runnable time.Duration // the time those goroutines waited, runnable, for a thread: the samples' bucket lower bounds summed, times 8 (an estimate)
}

// costSample is the process's counters at one instant.
type costSample struct {
	cpu      time.Duration
	allocs   uint64
	switches int64
	syscalls int64
	created  uint64
	latency  []uint64 // counts of the scheduler's latency histogram
}

var (
	costMetrics = []metrics.Sample{
		{Name: "/gc/heap/allocs:objects"},
		{Name: "/sched/goroutines-created:goroutines"},
		{Name: "/sched/latencies:seconds"},
	}
	latencyBuckets []float64 // the histogram's bucket boundaries, from the first read
)

// latencySampling is how many of a goroutine's transitions to running the
// runtime counts one of in /sched/latencies:seconds (gTrackingPeriod).
const latencySampling = 8

func sampleCost() costSample {
	var s costSample
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		s.switches = ru.Nvcsw + ru.Nivcsw
	}
	metrics.Read(costMetrics)
	if v := costMetrics[0].Value; v.Kind() == metrics.KindUint64 {
		s.allocs = v.Uint64()
	}
	if v := costMetrics[1].Value; v.Kind() == metrics.KindUint64 {
		s.created = v.Uint64()
	}
	if v := costMetrics[2].Value; v.Kind() == metrics.KindFloat64Histogram {
		h := v.Float64Histogram()
		s.latency = append([]uint64(nil), h.Counts...)
		if latencyBuckets == nil {
			latencyBuckets = append([]float64(nil), h.Buckets...)
		}
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
	c := Cost{CPU: e.cpu - s.cpu, Allocs: e.allocs - s.allocs, Switches: e.switches - s.switches,
		Syscalls: max(0, e.syscalls-s.syscalls-1), Created: e.created - s.created}
	for i := range min(len(s.latency), len(e.latency)) {
		n := (e.latency[i] - s.latency[i]) * latencySampling
		c.Wakeups += n
		if lo := latencyBuckets[i]; n > 0 && lo > 0 && !math.IsInf(lo, 0) {
			c.Runnable += time.Duration(float64(n) * lo * float64(time.Second))
		}
	}
	return c
}

// costMedians formats the medians of a side's costs as table cells:
// "CPU | allocations | switches | syscalls | created | wake-ups |
// runnable".
func costMedians(cs []Cost) string {
	var cols [7][]time.Duration
	for _, c := range cs {
		for i, v := range []time.Duration{c.CPU, time.Duration(c.Allocs), time.Duration(c.Switches), time.Duration(c.Syscalls),
			time.Duration(c.Created), time.Duration(c.Wakeups), c.Runnable} {
			cols[i] = append(cols[i], v)
		}
	}
	m := func(i int) int64 { return int64(Quantile(cols[i], 0.5)) }
	return fmt.Sprintf("%d µs | %d | %d | %d | %d | %d | %d µs", Quantile(cols[0], 0.5).Microseconds(), m(1), m(2), m(3), m(4), m(5),
		Quantile(cols[6], 0.5).Microseconds())
}
