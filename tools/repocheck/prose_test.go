package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestSentences(t *testing.T) {
	text := "# A heading. Not a sentence\n\nOne sentence. Two, on\ntwo lines!\n\n" +
		"```shell\ncode. not. prose.\n```\n| a table. | cell |\n<!-- a comment. -->\n- An item\n- Another item. Its second.\n"
	want := []string{"One sentence.", "Two, on two lines!", "An item", "Another item.", "Its second."}
	if diff := cmp.Diff(want, sentences(text)); diff != "" {
		t.Errorf("sentences(...): -want, +got:\n%s", diff)
	}
}

func TestCheckSentences(t *testing.T) {
	words := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "w%d ", i+1)
		}
		return b.String()
	}
	long := words(maxWords) + "over."
	cases := map[string]struct {
		reason string
		readme string
		want   []string
	}{
		"Short": {
			reason: "Sentences of at most 60 words pass.",
			readme: words(maxWords-1) + "end.\n",
		},
		"Long": {
			reason: "A sentence of 61 words is named, with its start.",
			readme: "Fine. " + long + "\n",
			want:   []string{`README.md: a sentence of 61 words, over 60: "w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12"...`},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := repo(t, map[string]string{"README.md": tc.readme, "docs/spec.md": "# Spec\n"})
			got, err := checkSentences(dir)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\ncheckSentences(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
