package actionevent

import (
	"github.com/go-json-experiment/json/jsontext"
)

// recordFields is a Record without its methods, for the decoder.
type recordFields Record

// Parse decodes one mac.action_event.v1 record strictly: unknown fields,
// wrongly typed values, null for a nested object and trailing data are
// errors naming the field. It does not call Validate. Receivers (the
// reference hub, tests) use it; it accepts exactly what AppendJSON and
// encoding/json produce.
func Parse(data []byte) (Record, error) {
	var r Record
	if err := unmarshal(data, (*recordFields)(&r), recordOptions); err != nil {
		return Record{}, formatError(err)
	}
	return r, nil
}

// SplitBatch splits the body of POST /action-events, {"events":[...]},
// into the raw bytes of each element, checking that the body is valid
// JSON of that shape. Elements are not decoded; pass each to Parse.
func SplitBatch(body []byte) ([][]byte, error) {
	var batch struct {
		Events *[]jsontext.Value `json:"events"`
	}
	if err := unmarshal(body, &batch, recordOptions); err != nil {
		return nil, formatError(err)
	}
	if batch.Events == nil {
		return nil, &FormatError{Field: "events", Reason: "missing"}
	}
	out := make([][]byte, len(*batch.Events))
	for i, v := range *batch.Events {
		out[i] = v
	}
	return out, nil
}
