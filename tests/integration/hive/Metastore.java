import org.apache.hadoop.hive.conf.HiveConf;
import org.apache.hadoop.hive.metastore.HiveMetaStore;
import org.apache.hadoop.hive.metastore.txn.TxnDbUtil;

/**
 * A Hive metastore (the one the pyspark wheel ships, on Derby) for the sink's tests.
 * Iceberg's HiveCatalog locks a table through the metastore's transaction tables, which
 * the metastore makes only in Hive's own test mode, whose checks refuse Iceberg's locks:
 * they are made here first, then the Thrift service starts as Hive's main would.
 */
public class Metastore {
  public static void main(String[] args) throws Throwable {
    TxnDbUtil.prepDb(new HiveConf());
    HiveMetaStore.main(args);
  }
}
