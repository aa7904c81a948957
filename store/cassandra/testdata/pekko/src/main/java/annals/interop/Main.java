package annals.interop;

import java.lang.management.ManagementFactory;
import java.time.Duration;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.time.temporal.ChronoUnit;
import java.util.Arrays;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;

import com.typesafe.config.Config;
import com.typesafe.config.ConfigFactory;
import com.typesafe.config.ConfigValueFactory;
import org.apache.pekko.Done;
import org.apache.pekko.actor.typed.ActorRef;
import org.apache.pekko.actor.typed.ActorSystem;
import org.apache.pekko.actor.typed.javadsl.AskPattern;
import org.apache.pekko.actor.typed.javadsl.Behaviors;
import org.apache.pekko.persistence.cassandra.query.javadsl.CassandraReadJournal;
import org.apache.pekko.persistence.query.EventEnvelope;
import org.apache.pekko.persistence.query.NoOffset;
import org.apache.pekko.persistence.query.PersistenceQuery;
import org.apache.pekko.persistence.query.TimeBasedUUID;
import org.apache.pekko.stream.javadsl.Sink;

/**
 * Writes and reads through Pekko Persistence Cassandra 1.1. Results go to stdout one per line;
 * errors to stderr with a non-zero exit.
 *
 * <pre>
 *   write KEYSPACE PID TAGS ITEM...   recovered a,b / written N   (TAGS comma-separated, may be "")
 *   recover KEYSPACE PID              recovered a,b
 *   tag KEYSPACE TAG COUNT            PID SEQNR ITEM OFFSET_UUID per event, in delivery order
 *   bench-write KEYSPACE PREFIX N M TAGS P, bench-recover KEYSPACE PID K   timings (see Bench)
 * </pre>
 *
 * -Dannals.autocreate=true lets Pekko create the keyspace and tables (for trying it out);
 * -Dannals.trace=true prints the time of each step to stderr.
 */
public final class Main {
  private static final Duration TIMEOUT = Duration.ofSeconds(30);
  /** How long tag writes and the tag query may take to show the expected events. */
  private static final Duration TAG_WAIT = Duration.ofSeconds(20);
  private static final boolean TRACE = Boolean.getBoolean("annals.trace");

  public static void main(String[] args) {
    // Start logging before Pekko and the driver log from several threads (else SLF4J warns on stderr).
    org.slf4j.LoggerFactory.getILoggerFactory();
    int code;
    try {
      code = run(args);
    } catch (Throwable t) {
      System.err.println("error: " + t);
      t.printStackTrace();
      code = 1;
    }
    System.out.flush();
    System.exit(code);
  }

  private static int run(String[] args) throws Exception {
    if (args.length < 1) return usage();
    switch (args[0]) {
      case "write":
        if (args.length < 4) return usage();
        return write(args[1], args[2], parseTags(args[3]), Arrays.copyOfRange(args, 4, args.length));
      case "recover":
        if (args.length != 3) return usage();
        return recover(args[1], args[2]);
      case "tag":
        if (args.length != 4) return usage();
        return tag(args[1], args[2], Integer.parseInt(args[3]));
      case "bench-write":
        if (args.length != 7) return usage();
        return Bench.write(args[1], args[2], Integer.parseInt(args[3]), Integer.parseInt(args[4]), parseTags(args[5]),
            Integer.parseInt(args[6]));
      case "bench-recover":
        if (args.length != 4) return usage();
        return Bench.recover(args[1], args[2], Integer.parseInt(args[3]));
      default:
        return usage();
    }
  }

  /** With -Dannals.trace=true, prints the time since JVM start of each step to stderr. */
  private static void trace(String step) {
    if (TRACE) System.err.printf("trace %6d ms %s%n",
        System.currentTimeMillis() - ManagementFactory.getRuntimeMXBean().getStartTime(), step);
  }

  private static int usage() {
    System.err.println("usage: write KEYSPACE PID TAGS ITEM... | recover KEYSPACE PID | tag KEYSPACE TAG COUNT"
        + " | bench-write KEYSPACE PREFIX N M TAGS P | bench-recover KEYSPACE PID K");
    return 2;
  }

  private static Set<String> parseTags(String s) {
    Set<String> tags = new LinkedHashSet<>();
    for (String t : s.split(",")) if (!t.isEmpty()) tags.add(t);
    return tags;
  }

  /** Pekko's configuration with the keyspace, first time bucket and autocreate flags set. */
  static Config config(String keyspace) {
    // Pekko's first-time-bucket format; the tag query walks hour buckets from here.
    String firstBucket = LocalDateTime.now(ZoneOffset.UTC).minusDays(1).truncatedTo(ChronoUnit.HOURS)
        .format(DateTimeFormatter.ofPattern("yyyyMMdd'T'HH:mm"));
    boolean auto = Boolean.getBoolean("annals.autocreate");
    String p = "pekko.persistence.cassandra.";
    Config overrides = ConfigFactory.empty()
        .withValue(p + "journal.keyspace", ConfigValueFactory.fromAnyRef(keyspace))
        .withValue(p + "snapshot.keyspace", ConfigValueFactory.fromAnyRef(keyspace))
        .withValue(p + "events-by-tag.first-time-bucket", ConfigValueFactory.fromAnyRef(firstBucket))
        .withValue(p + "journal.keyspace-autocreate", ConfigValueFactory.fromAnyRef(auto))
        .withValue(p + "journal.tables-autocreate", ConfigValueFactory.fromAnyRef(auto))
        .withValue(p + "snapshot.keyspace-autocreate", ConfigValueFactory.fromAnyRef(auto))
        .withValue(p + "snapshot.tables-autocreate", ConfigValueFactory.fromAnyRef(auto));
    return overrides.withFallback(ConfigFactory.load());
  }

  private static int write(String keyspace, String pid, Set<String> tags, String[] items) throws Exception {
    trace("main");
    ActorSystem<Cart.Command> system = ActorSystem.create(new Cart(pid, tags), "interop", config(keyspace));
    try {
      trace("actor system started");
      List<String> state = ask(system, Cart.Get::new);
      System.out.println("recovered " + String.join(",", state));
      trace("recovered");
      for (String item : items) ask(system, (ActorRef<Done> r) -> new Cart.Add(item, r));
      System.out.println("written " + items.length);
      trace("written");
      // Pekko writes tag_views after acknowledging the persist: wait until every tag shows the
      // last event before stopping. Each event adds one item, so the last sequence number is:
      long last = state.size() + items.length;
      if (items.length > 0) for (String tag : tags) awaitTagged(system, tag, pid, last);
      trace("tag_views written");
      return 0;
    } finally {
      terminate(system);
    }
  }

  private static int recover(String keyspace, String pid) throws Exception {
    trace("main");
    ActorSystem<Cart.Command> system = ActorSystem.create(new Cart(pid, Set.of()), "interop", config(keyspace));
    try {
      trace("actor system started");
      List<String> state = ask(system, Cart.Get::new);
      System.out.println("recovered " + String.join(",", state));
      trace("recovered");
      return 0;
    } finally {
      terminate(system);
    }
  }

  private static int tag(String keyspace, String tag, int count) throws Exception {
    trace("main");
    ActorSystem<Void> system = ActorSystem.create(Behaviors.empty(), "interop", config(keyspace));
    try {
      trace("actor system started");
      long deadline = System.nanoTime() + TAG_WAIT.toNanos();
      List<EventEnvelope> events = currentByTag(system, tag);
      while (events.size() < count && System.nanoTime() < deadline) {
        Thread.sleep(500);
        events = currentByTag(system, tag);
      }
      trace("queried");
      for (EventEnvelope e : events) {
        Object ev = e.event();
        String item = ev instanceof Added a ? a.item() : String.valueOf(ev);
        System.out.println(e.persistenceId() + " " + e.sequenceNr() + " " + item + " "
            + ((TimeBasedUUID) e.offset()).value());
      }
      if (events.size() < count) {
        System.err.println("error: tag " + tag + ": " + events.size() + " events, expected " + count);
        return 1;
      }
      return 0;
    } finally {
      terminate(system);
    }
  }

  private static List<EventEnvelope> currentByTag(ActorSystem<?> system, String tag) throws Exception {
    CassandraReadJournal journal = PersistenceQuery.get(system)
        .getReadJournalFor(CassandraReadJournal.class, CassandraReadJournal.Identifier());
    return await(system, journal.currentEventsByTag(tag, NoOffset.getInstance()).runWith(Sink.seq(), system));
  }

  /** Waits until the tag's events include pid's event seqNr (its tag_views row is written). */
  private static void awaitTagged(ActorSystem<?> system, String tag, String pid, long seqNr) throws Exception {
    long deadline = System.nanoTime() + TAG_WAIT.toNanos();
    while (true) {
      for (EventEnvelope e : currentByTag(system, tag))
        if (e.persistenceId().equals(pid) && e.sequenceNr() == seqNr) return;
      if (System.nanoTime() > deadline)
        throw new IllegalStateException("tag " + tag + ": event " + pid + " " + seqNr + " not in tag_views");
      Thread.sleep(100);
    }
  }

  private static <T> T ask(ActorSystem<Cart.Command> system, Function<ActorRef<T>, Cart.Command> msg) throws Exception {
    return await(system, AskPattern.ask(system, msg::apply, TIMEOUT, system.scheduler()));
  }

  /** The result, or a failure at once if the actor system stops first (the cart failed). */
  private static <T> T await(ActorSystem<?> system, CompletionStage<T> stage) throws Exception {
    CompletableFuture<T> f = stage.toCompletableFuture();
    CompletableFuture.anyOf(f, system.getWhenTerminated().toCompletableFuture())
        .get(TIMEOUT.toMillis() + 1000, TimeUnit.MILLISECONDS);
    if (!f.isDone()) throw new IllegalStateException("actor system stopped (the cart failed; see the log above)");
    return f.get();
  }

  private static void terminate(ActorSystem<?> system) throws Exception {
    system.terminate();
    system.getWhenTerminated().toCompletableFuture().get(TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
    trace("terminated");
  }
}
