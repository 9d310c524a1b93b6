//! MySQL's semaphore statements: no `ON CONFLICT` and no `RETURNING`, so the resource row is an
//! `INSERT IGNORE` and a new ticket is the session's last auto-increment value.

use diesel::prelude::*;
use diesel::MysqlConnection;

use super::control::{ControlDialect, ControlRequests, ControlTable, Insert, OnEveryConnection};
use super::statements::{new_ticket_values, semaphore_statements, NewTicket, SemaphoreStatements};

impl SemaphoreStatements for MysqlConnection {
    semaphore_statements!(.for_update());

    fn create_resource(&mut self, resource: &str, permits: i32) -> QueryResult<()> {
        use super::schema::diesel_lease_semaphores as resources;
        diesel::insert_or_ignore_into(resources::table)
            .values((
                resources::resource.eq(resource),
                resources::permits.eq(permits),
            ))
            .execute(self)
            .map(drop)
    }

    fn insert_ticket(&mut self, new: &NewTicket<'_>) -> QueryResult<i64> {
        use super::schema::diesel_lease_semaphore_tickets as tickets;
        diesel::insert_into(tickets::table)
            .values(new_ticket_values!(new))
            .execute(self)?;
        crate::backend::mysql::inserted_id(self)
    }
}

impl ControlDialect for MysqlConnection {
    fn insert_request<T: ControlTable>(&mut self, insert: Insert<'_, T>) -> QueryResult<i64> {
        insert.execute(self)?;
        crate::backend::mysql::inserted_id(self)
    }

    fn requests_on(table: &dyn OnEveryConnection) -> &dyn ControlRequests<Self> {
        table
    }
}
