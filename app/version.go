package app

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Version describes this build: the module version, the VCS revision and time it was built from (with
// "modified" when the work tree had changes), and the Go toolchain and platform, from
// runtime/debug.ReadBuildInfo. Built outside a module or VCS checkout it says what it knows.
func Version(program string) string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return fmt.Sprintf("%s (no build information) %s %s/%s", program, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	}
	return versionOf(program, info)
}

func versionOf(program string, info *debug.BuildInfo) string {
	version := info.Main.Version
	if version == "" {
		version = "(devel)"
	}
	var rev, at string
	modified := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", program, version)
	if info.Main.Path != "" {
		fmt.Fprintf(&b, " (%s)", info.Main.Path)
	}
	if rev != "" {
		fmt.Fprintf(&b, " revision %s", rev)
		if at != "" {
			fmt.Fprintf(&b, " %s", at)
		}
		if modified {
			b.WriteString(" modified")
		}
	}
	goVersion := info.GoVersion
	if goVersion == "" {
		goVersion = runtime.Version()
	}
	fmt.Fprintf(&b, " %s %s/%s", goVersion, runtime.GOOS, runtime.GOARCH)
	return b.String()
}
