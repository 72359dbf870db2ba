// Package docs holds no code: its tests keep the documentation true (the
// design's layers are the packages' imports; every example command of the
// README and of docs/*.md runs).
package docs
