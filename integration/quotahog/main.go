// Command quotahog is a worker for the integration tests. With no
// argument it opens inotify instances until the kernel refuses one and
// prints how many it got ("inotify N ERRNO"). With "shm MIB" it makes
// SysV shared memory segments of 1 MiB, touching each, until the kernel
// refuses one or MIB are made, and prints "shm N ERRNO" (ERRNO 0: all).
// With "pty N" it opens up to N ptys of its /dev/ptmx and prints "pty N
// ERRNO".
package main

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "pty" {
		want, _ := strconv.Atoi(os.Args[2])
		n := 0
		for n < want {
			if _, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY, 0); err != nil {
				fmt.Printf("pty %d %d\n", n, err.(unix.Errno))
				return
			}
			n++
		}
		fmt.Printf("pty %d 0\n", n)
		return
	}
	if len(os.Args) == 3 && os.Args[1] == "shm" {
		want, _ := strconv.Atoi(os.Args[2])
		n := 0
		for n < want {
			id, err := unix.SysvShmGet(unix.IPC_PRIVATE, 1<<20, unix.IPC_CREAT|0o600)
			if err != nil {
				fmt.Printf("shm %d %d\n", n, err.(unix.Errno))
				return
			}
			b, err := unix.SysvShmAttach(id, 0, 0)
			if err != nil {
				fmt.Printf("shm %d attach: %v\n", n, err)
				return
			}
			for i := range b {
				b[i] = 1
			}
			unix.SysvShmDetach(b) // the segment stays, in no process's memory
			n++
		}
		fmt.Printf("shm %d 0\n", n)
		return
	}
	n := 0
	for {
		if _, err := unix.InotifyInit1(0); err != nil {
			fmt.Printf("inotify %d %d\n", n, err.(unix.Errno))
			os.Exit(0)
		}
		n++
	}
}
