package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// percentile is the nearest-rank percentile p (0 < p ≤ 100) of sorted,
// an ascending slice: the smallest value such that at least p% of the
// values are at most it. It returns 0 for an empty slice.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// procStat is what the benchmark reads from /proc/PID/stat.
type procStat struct {
	pid, ppid, pgrp int
	comm            string
	ticks           uint64 // utime + stime, in clock ticks
	threads         int
}

// parseStat parses one /proc/PID/stat line. The command name is between
// the first '(' and the last ')' and may hold spaces and parentheses.
func parseStat(b []byte) (procStat, error) {
	var s procStat
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return s, errors.New("stat: no command name")
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:open])))
	if err != nil {
		return s, fmt.Errorf("stat: pid: %w", err)
	}
	s.pid, s.comm = pid, string(b[open+1:end])
	// After the name: state(3) ppid(4) pgrp(5) ... utime(14) stime(15) ...
	// num_threads(20); f[0] is field 3.
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 18 {
		return s, fmt.Errorf("stat: %d fields after the name", len(f))
	}
	num := func(i int) (uint64, error) { return strconv.ParseUint(f[i-3], 10, 64) }
	var v [5]uint64
	for i, field := range []int{4, 5, 14, 15, 20} {
		if v[i], err = num(field); err != nil {
			return s, fmt.Errorf("stat: field %d: %w", field, err)
		}
	}
	s.ppid, s.pgrp, s.ticks, s.threads = int(v[0]), int(v[1]), v[2]+v[3], int(v[4])
	return s, nil
}

// readStat reads /proc/PID/stat.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	return parseStat(b)
}

// procTable is a snapshot of every process's stat, with its children.
type procTable struct {
	byPID    map[int]procStat
	children map[int][]int
}

// scanProcs reads every /proc/PID/stat once. Processes that exit while it
// reads are left out.
func scanProcs() (procTable, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return procTable{}, err
	}
	t := procTable{byPID: map[int]procStat{}, children: map[int][]int{}}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		s, err := readStat(pid)
		if err != nil {
			continue
		}
		t.byPID[pid] = s
		t.children[s.ppid] = append(t.children[s.ppid], pid)
	}
	return t, nil
}

// tree returns root and every descendant of it in t, root first.
func (t procTable) tree(root int) []procStat {
	var out []procStat
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		s, ok := t.byPID[pid]
		if !ok {
			continue
		}
		out = append(out, s)
		kids := slices.Clone(t.children[pid])
		slices.Sort(kids)
		queue = append(queue, kids...)
	}
	return out
}

// parseKB reads "Name:   1234 kB" lines (smaps_rollup, meminfo) into a
// map of name to KiB. Lines of another shape are ignored.
func parseKB(r io.Reader) (map[string]uint64, error) {
	m := map[string]uint64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			continue
		}
		v, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		m[name] = v
	}
	return m, sc.Err()
}

// readKB parses a file of "Name: N kB" lines.
func readKB(path string) (map[string]uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseKB(f)
}

// pssKiB is a process's proportional set size (smaps_rollup).
func pssKiB(pid int) (uint64, error) {
	m, err := readKB(filepath.Join("/proc", strconv.Itoa(pid), "smaps_rollup"))
	if err != nil {
		return 0, err
	}
	v, ok := m["Pss"]
	if !ok {
		return 0, fmt.Errorf("pid %d: no Pss in smaps_rollup", pid)
	}
	return v, nil
}

// memAvailableKiB is the kernel's estimate of memory available for new
// work (/proc/meminfo MemAvailable).
func memAvailableKiB() (uint64, error) {
	m, err := readKB("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	v, ok := m["MemAvailable"]
	if !ok {
		return 0, errors.New("no MemAvailable in /proc/meminfo")
	}
	return v, nil
}

// parseRate finds connbench's "rate=R" in its output.
func parseRate(out string) (float64, bool) {
	for _, f := range strings.Fields(out) {
		if v, ok := strings.CutPrefix(f, "rate="); ok {
			r, err := strconv.ParseFloat(v, 64)
			return r, err == nil
		}
	}
	return 0, false
}

// phaseTimes are the start-up trace's phases (internal/diag/starttrace.Mark) of a
// burst: for each phase, its time after the start line in every sandbox
// that reached it.
type phaseTimes struct {
	order []string // "parent main", ..., by first appearance
	times map[string][]time.Duration
}

// parseTrace reads trace lines "ID PROCESS PHASE UNIXNANO" and keeps
// those whose ID is in ids, as offsets from start. Malformed lines are
// an error.
func parseTrace(r io.Reader, ids map[string]bool, start time.Time) (phaseTimes, error) {
	p := phaseTimes{times: map[string][]time.Duration{}}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 4 {
			return p, fmt.Errorf("trace line %d: %d fields, want 4", n, len(f))
		}
		ns, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			return p, fmt.Errorf("trace line %d: %w", n, err)
		}
		if !ids[f[0]] {
			continue
		}
		name := f[1] + " " + f[2]
		if _, ok := p.times[name]; !ok {
			p.order = append(p.order, name)
		}
		p.times[name] = append(p.times[name], time.Unix(0, ns).Sub(start))
	}
	for _, v := range p.times {
		slices.Sort(v)
	}
	// Phases in the order a start passes them: by median.
	slices.SortStableFunc(p.order, func(a, b string) int {
		return int(percentile(p.times[a], 50) - percentile(p.times[b], 50))
	})
	return p, sc.Err()
}
