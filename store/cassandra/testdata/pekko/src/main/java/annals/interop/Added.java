package annals.interop;

/**
 * The cart's only event. Stored with ser_id 33, ser_manifest "annals.interop.Added"
 * and the payload {"item":"..."}.
 */
public record Added(String item) implements JsonSerializable {}
