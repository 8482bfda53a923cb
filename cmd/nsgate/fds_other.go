//go:build !linux

package main

func closeInheritedOnExec() {}
