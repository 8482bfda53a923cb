//go:build !linux

package relay

import "syscall"

const rawIOMax = 0

func rawRead(fd uintptr, p []byte) (int, syscall.Errno) {
	n, err := syscall.Read(int(fd), p)
	if err != nil {
		return 0, err.(syscall.Errno)
	}
	return n, 0
}

func rawSend(fd uintptr, p []byte) (int, syscall.Errno) {
	n, err := syscall.Write(int(fd), p)
	if err != nil {
		return 0, err.(syscall.Errno)
	}
	return n, 0
}
