package scaleway

import (
	"reflect"
	"testing"
)

func TestTags(t *testing.T) {
	tags := FormatTags(Tags{TagNodeClaim: "default-abc", TagManagedBy: "c1", "x": "a=b"})
	want := []string{"karpenter.sh/managed-by=c1", "karpenter.sh/nodeclaim=default-abc", "x=a=b"}
	if !reflect.DeepEqual(tags, want) {
		t.Fatalf("FormatTags %v", tags)
	}
	p := ParseTags(append(tags, "console-tag", "x=second"))
	if p["x"] != "a=b" || p[TagManagedBy] != "c1" || p["console-tag"] != "" || len(p) != 4 {
		t.Fatalf("ParseTags %v", p)
	}
	if v, ok := TagValue(tags, TagNodeClaim); !ok || v != "default-abc" {
		t.Fatalf("TagValue %q %v", v, ok)
	}
	if _, ok := TagValue(tags, "karpenter.sh/node"); ok {
		t.Fatal("TagValue matched a key prefix")
	}
	if !HasTags(tags, "x=a=b", Tag(TagManagedBy, "c1")) || HasTags(tags, "x=a") {
		t.Fatal("HasTags")
	}
}

func TestSetTagIn(t *testing.T) {
	in := []string{"console", TagPhase + "=ordered", "a=1", TagPhase + "=stale"}
	out, changed := SetTagIn(in, TagPhase, "rescue")
	if !changed || !reflect.DeepEqual(out, []string{"console", TagPhase + "=rescue", "a=1"}) {
		t.Fatalf("%v %v", out, changed)
	}
	if in[1] != TagPhase+"=ordered" {
		t.Fatal("input modified")
	}
	out2, changed := SetTagIn(out, TagPhase, "rescue")
	if changed || !reflect.DeepEqual(out2, out) {
		t.Fatalf("no-op reported a change: %v", out2)
	}
	out3, changed := SetTagIn([]string{"a=1"}, "b", "")
	if !changed || !reflect.DeepEqual(out3, []string{"a=1", "b="}) {
		t.Fatalf("%v", out3)
	}
	out4, changed := RemoveTagIn(in, TagPhase)
	if !changed || !reflect.DeepEqual(out4, []string{"console", "a=1"}) {
		t.Fatalf("%v", out4)
	}
	if _, changed := RemoveTagIn(out4, TagPhase); changed {
		t.Fatal("remove of absent key changed")
	}
}
