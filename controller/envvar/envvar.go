// Package envvar describes the environment variables the controller reads
// outside its flags (credentials, API and bucket settings), so that the
// packages reading them also document them: `--help` and the settings
// reference (docs/settings.md) are built from these descriptions.
package envvar

// Var is one environment variable.
type Var struct {
	Name string
	// Default is what an unset variable means ("" when it has none).
	Default string
	Usage   string
	// Secret: a credential, set from a Kubernetes Secret; its value is never
	// printed, and it has no flag.
	Secret bool
}
