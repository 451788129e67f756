package v1alpha1

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsjson "sigs.k8s.io/json"
)

// UnmarshalJSON decodes a NodeClass as the API machinery's JSON decoder does,
// with one difference: a field whose stored value this controller cannot
// decode does not fail the object. Such a value can be in etcd (written
// before the CRD refused it, or accepted by a CRD looser than the Go types,
// such as a minimumLifetime of 3000000h, which the pattern allowed and
// time.ParseDuration refuses). A NodeClass that fails to decode fails the
// informer's whole list, the cache never syncs, and the operator (Karpenter
// core's controllers with it) stops: no server is collected, no spare released
// before its renewal, for every NodeClass. Instead, the field is left at its
// zero value and named in Undecodable; the controllers skip what the
// NodeClass would decide (orders, drift, warm pool) and the status controller
// reports it (Ready=False, reason SpecUnreadable, an event and a log line).
func (in *ScalewayElasticMetalNodeClass) UnmarshalJSON(data []byte) error {
	// plain has the fields and none of the methods, so decoding it does not
	// come back here.
	type plain ScalewayElasticMetalNodeClass
	var p plain
	err := sigsjson.UnmarshalCaseSensitivePreserveInts(data, &p)
	if err == nil {
		*in = ScalewayElasticMetalNodeClass(p)
		return nil
	}
	var parts struct {
		metav1.TypeMeta `json:",inline"`
		ObjectMeta      metav1.ObjectMeta `json:"metadata"`
		Spec            json.RawMessage   `json:"spec"`
		Status          json.RawMessage   `json:"status"`
	}
	if sigsjson.UnmarshalCaseSensitivePreserveInts(data, &parts) != nil {
		// Not an object, or its metadata is broken: nothing to name it by.
		return err
	}
	out := ScalewayElasticMetalNodeClass{TypeMeta: parts.TypeMeta, ObjectMeta: parts.ObjectMeta}
	problems := decodeLeniently(parts.Spec, reflect.ValueOf(&out.Spec).Elem(), "spec")
	problems = append(problems, decodeLeniently(parts.Status, reflect.ValueOf(&out.Status).Elem(), "status")...)
	out.Undecodable = strings.Join(problems, "; ")
	*in = out
	return nil
}

var (
	packagePath     = reflect.TypeFor[ScalewayElasticMetalNodeClass]().PkgPath()
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
)

// decodeLeniently decodes raw into v; when that fails and v is one of this
// package's structs (or a pointer to one), it decodes field by field, so
// that only the fields that fail stay zero. It returns the failures, each
// with its path.
func decodeLeniently(raw json.RawMessage, v reflect.Value, path string) []string {
	if len(raw) == 0 {
		return nil
	}
	fresh := reflect.New(v.Type())
	err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, fresh.Interface())
	if err == nil {
		v.Set(fresh.Elem())
		return nil
	}
	st, fields, ok := ownStruct(raw, v)
	if !ok {
		return []string{fmt.Sprintf("%s: %s", path, decodeMessage(err))}
	}
	return decodeFields(fields, v, st, path)
}

// ownStruct returns the struct type behind v and raw's fields when v is one
// of this package's structs (or a pointer to one) without its own
// UnmarshalJSON and raw is a JSON object: then it can be decoded field by
// field.
func ownStruct(raw json.RawMessage, v reflect.Value) (reflect.Type, map[string]json.RawMessage, bool) {
	st := v.Type()
	if st.Kind() == reflect.Pointer {
		st = st.Elem()
	}
	var fields map[string]json.RawMessage
	if st.Kind() != reflect.Struct || st.PkgPath() != packagePath || reflect.PointerTo(st).Implements(unmarshalerType) ||
		sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &fields) != nil || fields == nil {
		return nil, nil, false
	}
	return st, fields, true
}

// decodeFields decodes each of fields into v's field of that JSON name
// (allocating v when it is a pointer), and returns every field's failures.
func decodeFields(fields map[string]json.RawMessage, v reflect.Value, st reflect.Type, path string) []string {
	target := v
	if v.Kind() == reflect.Pointer {
		v.Set(reflect.New(st))
		target = v.Elem()
	}
	var problems []string
	for i := range st.NumField() {
		name, _, _ := strings.Cut(st.Field(i).Tag.Get("json"), ",")
		if r, ok := fields[name]; ok && name != "" && name != "-" {
			problems = append(problems, decodeLeniently(r, target.Field(i), path+"."+name)...)
		}
	}
	return problems
}

// decodeMessage is err without the Go type names the JSON decoder adds.
func decodeMessage(err error) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return fmt.Sprintf("cannot decode %s as %s", typeErr.Value, typeErr.Type.Kind())
	}
	return err.Error()
}

// Unreadable says which stored values of the NodeClass this controller
// could not decode (nil: none); see UnmarshalJSON.
func (in *ScalewayElasticMetalNodeClass) Unreadable() error {
	if in.Undecodable == "" {
		return nil
	}
	return fmt.Errorf("nodeclass %s holds values this controller cannot read (%s): fix them (kubectl edit emnc %s)",
		in.Name, in.Undecodable, in.Name)
}
