package kafka

// HeadReads returns how many reads of j read a partition's head
// themselves (the head cache served the others).
func HeadReads(j *Journal) int64 { return j.headReads.Load() }

// CertificateRefusal is certificateRefusal, for its tests.
var CertificateRefusal = certificateRefusal
