package eventual

import "github.com/annals-go/annals/store/kafka/wire"

// Row is a record's nullable journal-table columns as a store writes
// them: nil for NULL (no origin, version, payload or headers), the payload
// in payload_txt for text and JSON and in payload_bin for binary, as the
// Scala library stores it.
type Row struct {
	Origin, Version                     any
	PayloadType, PayloadTxt, PayloadBin any
	Metadata                            string
	Headers                             any
	Tags                                []string // never nil
}

// Row returns r's column values.
func (r Record) Row() (Row, error) {
	meta, err := r.MetadataJSON()
	if err != nil {
		return Row{}, err
	}
	row := Row{Metadata: meta, Tags: r.Event.Tags}
	if row.Tags == nil {
		row.Tags = []string{}
	}
	if r.Origin != "" {
		row.Origin = r.Origin
	}
	if r.Version != "" {
		row.Version = r.Version
	}
	if len(r.Headers) > 0 {
		row.Headers = r.Headers
	}
	if p := r.Event.Payload; p != nil {
		row.PayloadType = string(p.Type)
		if p.Type == wire.Binary {
			row.PayloadBin = p.Data
		} else {
			row.PayloadTxt = string(p.Data)
		}
	}
	return row, nil
}

// FillFromRow sets r's fields from the nullable columns a store read (nil
// for NULL); the metadata stays raw until asked for.
func (r *Record) FillFromRow(origin, version, payloadType, payloadTxt *string, payloadBin []byte, metadata *string) {
	r.Timestamp = r.Timestamp.UTC()
	if origin != nil {
		r.Origin = *origin
	}
	if version != nil {
		r.Version = *version
	}
	if payloadType != nil {
		p := &wire.Payload{Type: wire.PayloadType(*payloadType), Data: payloadBin}
		if p.Type != wire.Binary && payloadTxt != nil {
			p.Data = []byte(*payloadTxt)
		}
		if p.Data == nil {
			p.Data = []byte{}
		}
		r.Event.Payload = p
	}
	if metadata != nil {
		r.RawMetadata = *metadata
	}
}
