-- sysbench workload for server-shim (GlueSQL engine): one `SELECT 1` per event on a
-- connection each thread opens once. Used by bench/forwarding for the perceptron-held
-- vs direct-route comparison, where stock oltp_* tables are out of the shim's SQL reach.
function thread_init()
  drv = sysbench.sql.driver()
  con = drv:connect()
end

function event()
  con:query("SELECT 1")
end

function thread_done()
  con:disconnect()
end
