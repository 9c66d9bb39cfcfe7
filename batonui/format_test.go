package batonui

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestUnescapeHTML(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`{"a":"\u003cscript\u003e \u0026"}`: `{"a":"<script> &"}`,
		`{"a":"\\u003c"}`:                   `{"a":"\\u003c"}`, // an escaped backslash, then text
		`{"a":"\"\u00e9\n"}`:                `{"a":"\"\u00e9\n"}`,
		`["\u003C"]`:                        `["<"]`,
	} {
		require.Equal(t, want, unescapeHTML([]byte(in)), in)
	}
}
