package main

import (
	"io"
	"strings"
	"testing"
)

// `exacto classify --lang fr` is refused, naming the languages it reads; nothing is
// read from stdin first.
func TestClassifyRefusesAnUnreadLanguage(t *testing.T) {
	cmd := classifyCmd()
	cmd.SetArgs([]string{"--lang", "fr"})
	cmd.SetIn(strings.NewReader("Pas intéressé."))
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	if err := cmd.Execute(); err == nil || err.Error() != "--lang fr: the classifier does not read French (it reads English, Spanish and Portuguese: en, es, pt)" {
		t.Fatalf("got %v", err)
	}
}
