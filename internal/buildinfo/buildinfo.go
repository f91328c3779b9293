// Package buildinfo is what a binary of this repository says of its own
// build, as the Go toolchain recorded it: its main module's version and the
// revision it was built from. The function, the relay and the cluster agent
// answer --version with it, and the function logs it as it starts.
package buildinfo

import "runtime/debug"

// Read returns the main module's version ("(devel)" for a build from a
// checkout, "(unknown)" for a binary without build information) and the
// VCS revision, with "+modified" for a tree with uncommitted changes; the
// revision is empty where none was recorded (go build -buildvcs=false, or a
// build from the module cache).
func Read() (version, revision string) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)", ""
	}
	return fromSettings(bi.Main.Version, bi.Settings)
}

// fromSettings is Read's reading of a build's version and settings.
func fromSettings(version string, settings []debug.BuildSetting) (string, string) {
	if version == "" {
		version = "(unknown)"
	}
	var revision string
	modified := false
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if revision != "" && modified {
		revision += "+modified"
	}
	return version, revision
}

// Line is what a binary named name prints for --version: its name,
// version and, when recorded, revision.
func Line(name string) string {
	version, revision := Read()
	return line(name, version, revision)
}

func line(name, version, revision string) string {
	if revision == "" {
		return name + " " + version
	}
	return name + " " + version + " (revision " + revision + ")"
}
