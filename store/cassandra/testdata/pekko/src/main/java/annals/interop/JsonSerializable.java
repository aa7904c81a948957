package annals.interop;

/**
 * Marker for classes Pekko serializes with jackson-json; bound in application.conf. Pekko's id for
 * jackson-json is 31 (33 is jackson-cbor), unless serialization-identifiers is overridden.
 */
public interface JsonSerializable {}
