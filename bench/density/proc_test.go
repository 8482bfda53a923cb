package main

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	for _, c := range []struct {
		vals []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 50, 0},
		{ms(7), 50, 7 * time.Millisecond},
		{ms(7), 99, 7 * time.Millisecond},
		{ms(1, 2, 3, 4), 50, 2 * time.Millisecond},    // rank ceil(2) = 2
		{ms(1, 2, 3, 4, 5), 50, 3 * time.Millisecond}, // rank ceil(2.5) = 3
		{ms(hundred...), 99, 99 * time.Millisecond},
		{ms(hundred...), 100, 100 * time.Millisecond},
		{ms(hundred...), 1, 1 * time.Millisecond},
		{ms(hundred...), 0, 1 * time.Millisecond}, // clamped to the first
		{ms(append(hundred, 1000)...), 99, 100 * time.Millisecond},
	} {
		if got := percentile(c.vals, c.p); got != c.want {
			t.Errorf("percentile(%d values, %g) = %v, want %v", len(c.vals), c.p, got, c.want)
		}
	}
}

func TestParseStat(t *testing.T) {
	line := "4242 (my (odd) name) S 4200 4242 4242 0 -1 4194560 120 0 0 0 17 5 0 0 20 0 9 0 12345 1000 200 18446744073709551615\n"
	s, err := parseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if s.pid != 4242 || s.comm != "my (odd) name" || s.ppid != 4200 || s.pgrp != 4242 || s.ticks != 22 || s.threads != 9 {
		t.Errorf("parseStat = %+v", s)
	}
	for _, bad := range []string{"", "12 noparen S 1", "12 (x) S 1 2", "x (y) S " + strings.Repeat("1 ", 20), "1 (x) S a 1 1 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0"} {
		if _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("parseStat(%q) accepted", bad)
		}
	}
}

func TestParseKB(t *testing.T) {
	in := "55d0c0a00000-7ffd8a7ff000 ---p 00000000 00:00 0                          [rollup]\nRss:               13884 kB\nPss:                2233 kB\nPss_Anon:           1896 kB\nHugePages_Total:       0\nBogus: x kB\n"
	if _, err := parseKB(strings.NewReader(in)); err == nil {
		t.Error("a bad number was accepted")
	}
	in = strings.Replace(in, "Bogus: x kB\n", "", 1)
	m, err := parseKB(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if m["Rss"] != 13884 || m["Pss"] != 2233 || m["Pss_Anon"] != 1896 || len(m) != 3 {
		t.Errorf("parseKB = %v", m)
	}
}

func TestParseRate(t *testing.T) {
	if v, ok := parseRate("conns=1234 errors=0 secs=5.00 rate=246.8\n"); !ok || v != 246.8 {
		t.Errorf("parseRate = %v %v", v, ok)
	}
	for _, bad := range []string{"", "conns=0", "rate=abc"} {
		if _, ok := parseRate(bad); ok {
			t.Errorf("parseRate(%q) accepted", bad)
		}
	}
}

func TestParseSizes(t *testing.T) {
	if got, err := parseSizes("100, 500,1000"); err != nil || len(got) != 3 || got[2] != 1000 {
		t.Errorf("parseSizes = %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "-1", "10,x"} {
		if _, err := parseSizes(bad); err == nil {
			t.Errorf("parseSizes(%q) accepted", bad)
		}
	}
}

func TestTree(t *testing.T) {
	tab := procTable{byPID: map[int]procStat{}, children: map[int][]int{}}
	for _, p := range []procStat{{pid: 10, ppid: 1}, {pid: 12, ppid: 10}, {pid: 11, ppid: 10}, {pid: 13, ppid: 11}, {pid: 20, ppid: 1}} {
		tab.byPID[p.pid] = p
		tab.children[p.ppid] = append(tab.children[p.ppid], p.pid)
	}
	var got []int
	for _, p := range tab.tree(10) {
		got = append(got, p.pid)
	}
	if want := []int{10, 11, 12, 13}; !slices.Equal(got, want) {
		t.Errorf("tree(10) = %v, want %v", got, want)
	}
	if got := tab.tree(99); len(got) != 0 {
		t.Errorf("tree of a missing pid = %v", got)
	}
}

func TestParseTrace(t *testing.T) {
	start := time.Unix(100, 0)
	at := func(ms int) string {
		return strconv.FormatInt(start.Add(time.Duration(ms)*time.Millisecond).UnixNano(), 10)
	}
	in := strings.Join([]string{
		"11 parent main " + at(30),
		"11 init main " + at(50),
		"12 parent main " + at(10),
		"99 parent main " + at(1), // another run's sandbox
		"",
		"12 init main " + at(70),
		"11 parent released " + at(90),
	}, "\n")
	p, err := parseTrace(strings.NewReader(in), map[string]bool{"11": true, "12": true}, start)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"parent main", "init main", "parent released"}; !slices.Equal(p.order, want) {
		t.Errorf("order %v, want %v", p.order, want)
	}
	if got := p.times["parent main"]; len(got) != 2 || got[0] != 10*time.Millisecond || got[1] != 30*time.Millisecond {
		t.Errorf("parent main %v", got)
	}
	for _, bad := range []string{"11 parent main", "11 parent main x", "1 2 3 4 5"} {
		if _, err := parseTrace(strings.NewReader(bad), nil, start); err == nil {
			t.Errorf("parseTrace(%q) accepted", bad)
		}
	}
}
