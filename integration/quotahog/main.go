// Command quotahog is a worker for the integration tests: it opens inotify
// instances until the kernel refuses one and prints how many it got
// ("inotify N ERRNO").
package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

func main() {
	n := 0
	for {
		if _, err := unix.InotifyInit1(0); err != nil {
			fmt.Printf("inotify %d %d\n", n, err.(unix.Errno))
			os.Exit(0)
		}
		n++
	}
}
