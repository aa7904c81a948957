package annals.interop;

/** Marker for classes Pekko serializes with jackson-json (serializer id 33); bound in application.conf. */
public interface JsonSerializable {}
