package annals.interop;

/**
 * The cart's only event. Stored with ser_id 31 (jackson-json), ser_manifest "annals.interop.Added",
 * event_manifest "" and the payload {"item":"..."}.
 */
public record Added(String item) implements JsonSerializable {}
