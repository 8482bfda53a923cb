package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is set at link time (-ldflags "-X main.version=...").
var version = "dev"

func versionString() string {
	if version != "dev" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return version
}

func versionLine() string {
	gv := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "gvisor.dev/gvisor" {
				gv = d.Version
			}
		}
	}
	return fmt.Sprintf("nsgate %s (%s, gvisor %s, %s/%s)", versionString(), runtime.Version(), gv, runtime.GOOS, runtime.GOARCH)
}
