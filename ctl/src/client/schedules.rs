//! The control API's schedule calls (`/v1/schedules`).

use hyper::Method;

use super::{Client, ClientError, encode};
use crate::api::{API_PREFIX, ScheduleInfo, ScheduleList, ScheduleRequest};

impl Client {
    pub async fn add_schedule(
        &self,
        request: &ScheduleRequest,
    ) -> Result<ScheduleInfo, ClientError> {
        let body = serde_json::to_vec(request).map_err(|e| ClientError::Decode(e.to_string()))?;
        self.call(Method::POST, &format!("{API_PREFIX}/schedules"), Some(body))
            .await
    }

    /// Every schedule, or one route's.
    pub async fn schedules(&self, route: Option<&str>) -> Result<Vec<ScheduleInfo>, ClientError> {
        let path = match route {
            Some(route) => format!("{API_PREFIX}/schedules?route={}", encode(route)),
            None => format!("{API_PREFIX}/schedules"),
        };
        let list: ScheduleList = self.call(Method::GET, &path, None).await?;
        Ok(list.schedules)
    }

    pub async fn remove_schedule(&self, id: &str) -> Result<ScheduleInfo, ClientError> {
        let path = format!("{API_PREFIX}/schedules/{}", encode(id));
        self.call(Method::DELETE, &path, None).await
    }

    /// Pauses (`true`) or resumes a schedule.
    pub async fn pause_schedule(&self, id: &str, pause: bool) -> Result<ScheduleInfo, ClientError> {
        let verb = if pause { "pause" } else { "resume" };
        let path = format!("{API_PREFIX}/schedules/{}/{verb}", encode(id));
        self.call(Method::POST, &path, None).await
    }
}
