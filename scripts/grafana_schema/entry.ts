import { Dashboard } from '@grafana/schema';
export type GrafanaDashboard = Dashboard;
