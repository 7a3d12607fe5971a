package caddymodule

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// jsonError words a decoding error of a request body for the client, in the contract's words
// (docs/api.md): a field by its JSON name, never a Go type (encoding/json says "Go struct field
// buyRequest.qty of type int64").
func jsonError(err error) error {
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &typ) && typ.Field == "":
		return errors.New("the body must be a JSON object")
	case errors.As(err, &typ):
		return fmt.Errorf("%s must be %s, not %s", typ.Field, jsonWant(typ.Type), jsonGot(typ.Value))
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return errors.New("the body is not valid JSON: it ends too soon")
	}
	return fmt.Errorf("the body is not valid JSON: %w", err)
}

// jsonWant names the JSON value a Go type takes.
func jsonWant(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
}

// jsonGot names the JSON value encoding/json found ("string", "number 1.5", "bool", ...).
func jsonGot(v string) string {
	switch {
	case strings.HasPrefix(v, "number "):
		return strings.TrimPrefix(v, "number ")
	case v == "bool":
		return "true or false"
	case v == "array", v == "object":
		return "an " + v
	}
	return "a " + v
}
