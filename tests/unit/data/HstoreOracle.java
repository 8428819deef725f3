// What Debezium's PostgreSQL connector makes of hstore texts (hstore.handling.mode=json):
// the JDBC driver's HStoreConverter.fromString, then Jackson's generator over the map's
// entries. One base64 text per input line; one base64 JSON text per output line.
import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.Map;
import org.postgresql.util.HStoreConverter;

public class HstoreOracle {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, true, "UTF-8");
        JsonFactory factory = new JsonFactory();
        for (String line; (line = in.readLine()) != null; ) {
            String text = new String(Base64.getDecoder().decode(line), StandardCharsets.UTF_8);
            Map<String, String> map = HStoreConverter.fromString(text);
            StringWriter writer = new StringWriter();
            try (JsonGenerator generator = factory.createGenerator(writer)) {
                generator.writeStartObject();
                for (Map.Entry<String, String> entry : map.entrySet()) {
                    generator.writeStringField(entry.getKey(), entry.getValue());
                }
                generator.writeEndObject();
            }
            out.println(Base64.getEncoder().encodeToString(writer.toString().getBytes(StandardCharsets.UTF_8)));
        }
    }
}
